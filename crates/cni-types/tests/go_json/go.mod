module rcni/cni-types/go_json

go 1.19
