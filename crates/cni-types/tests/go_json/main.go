// Command go_json decodes a table of JSON objects with Go's encoding/json into structs shaped
// like CNI plugin configs and prints one JSON line per case: the input, and the fields as Go
// left them (or the error). cni-types' tests/go_json.rs compares its decoding model with
// expected.jsonl, this program's output. See README.md.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

// Inner is a nested config section (like runtimeConfig).
type Inner struct {
	A *int `json:"a"`
	B *int `json:"b"`
}

// Conf has one field of each kind a plugin config uses. Pointers show whether Go assigned
// anything; value fields show what an earlier member leaves behind a null.
type Conf struct {
	Mtu    int            `json:"mtu"`
	MtuPtr *int           `json:"mtuPtr"`
	Name   string         `json:"name"`
	Kind   *string        `json:"kind"`
	List   []int          `json:"list"`
	Map    map[string]int `json:"map"`
	Sub    Inner          `json:"sub"`
	SubPtr *Inner         `json:"subPtr"`
}

// Twins has two fields whose names differ only in case.
type Twins struct {
	Lower *int `json:"ab"`
	Upper *int `json:"AB"`
}

var cases = []struct{ target, input string }{
	{"conf", `{"mtu":1,"mtu":2}`},
	{"conf", `{"mtu":1,"MTU":2}`},
	{"conf", `{"MTU":1,"mtu":2}`},
	{"conf", `{"mtu":1,"MTU":2,"Mtu":3}`},
	{"conf", `{"Mtu":1,"mtu":2,"MTU":3}`},
	{"conf", `{"mtu":1,"MTU":2,"mtu":3,"MTU":4}`},
	{"conf", `{"mtuptr":1,"MTUPTR":2}`},
	{"conf", `{"mtu":1,"mtu":null}`},
	{"conf", `{"mtuPtr":1,"mtuPtr":null}`},
	{"conf", `{"mtuPtr":1,"MTUPTR":null}`},
	{"conf", `{"mtuPtr":null,"mtuPtr":2}`},
	{"conf", `{"name":"a","NAME":null}`},
	{"conf", `{"kind":"a","Kind":null}`},
	{"conf", `{"kind":"a","KIND":"b"}`},
	{"conf", `{"list":[1,2],"LIST":[3]}`},
	{"conf", `{"list":[1,2],"list":null}`},
	{"conf", `{"map":{"x":1},"MAP":{"y":2}}`},
	{"conf", `{"map":{"x":1},"map":null}`},
	{"conf", `{"sub":{"a":1},"sub":{"b":2}}`},
	{"conf", `{"sub":{"a":1},"SUB":{"a":3}}`},
	{"conf", `{"sub":{"a":1},"sub":null}`},
	{"conf", `{"sub":{"a":1},"Sub":{"A":null}}`},
	{"conf", `{"subPtr":{"a":1},"SUBPTR":{"b":2}}`},
	{"conf", `{"subPtr":{"a":1},"subPtr":null}`},
	{"conf", `{"subPtr":{"a":1},"subPtr":null,"subPtr":{"b":2}}`},
	{"conf", `{"sub":{"a":1,"A":2,"a":3}}`},
	{"conf", `{"na\u006de":"escaped"}`},
	{"conf", "{\"mtu\u212a\":1}"},
	{"conf", "{\"\u212aind\":\"kelvin\"}"},
	{"conf", "{\"name\":\"x\",\"\u017fub\":{\"a\":7}}"},
	{"conf", `{"MTU":1,"unknown":1e400}`},
	{"conf", `{"mtu":"1","name":"n"}`},
	{"twins", `{"ab":1,"AB":2}`},
	{"twins", `{"AB":2,"ab":1}`},
	{"twins", `{"Ab":3}`},
	{"twins", `{"ab":1,"Ab":3}`},
	{"twins", `{"AB":2,"aB":3}`},
}

func main() {
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	for _, c := range cases {
		var target interface{}
		if c.target == "twins" {
			target = &Twins{}
		} else {
			target = &Conf{}
		}
		line := map[string]interface{}{"target": c.target, "input": c.input}
		if err := json.Unmarshal([]byte(c.input), target); err != nil {
			line["error"] = err.Error()
		}
		line["decoded"] = target
		if err := out.Encode(line); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
