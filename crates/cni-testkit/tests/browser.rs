//! The test browser itself: headless Chromium in a sandbox namespace loads a page served
//! there, evaluates JavaScript in it and takes a screenshot; nothing of it is left after.

use std::time::Duration;

use cni_testkit::browser::Browser;
use cni_testkit::{http_server, Sandbox, HTTP_BODY};

#[test]
fn chromium_loads_a_page_answers_javascript_and_takes_a_screenshot() {
    if !cni_testkit::is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    if !Browser::available() {
        eprintln!("skipping: chromium is not installed");
        return;
    }
    let sb = Sandbox::new().unwrap();
    let server = http_server(&sb.host().name, [127, 0, 0, 1], 0).unwrap();
    let mut browser = Browser::open(&sb.host().name, &server.url(), 800, 600).unwrap();
    let text = browser
        .wait_for(
            "document.body && document.body.innerText",
            Duration::from_secs(20),
        )
        .unwrap();
    assert_eq!(text.as_str().unwrap().trim(), HTTP_BODY.trim());
    assert_eq!(browser.eval("1 + 2").unwrap(), 3);
    assert!(browser.eval("nope.nothing").is_err());
    let png = sb.dir().join("shot.png");
    browser.screenshot(&png).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    let pid = browser_pid(&sb.host().name);
    drop(browser);
    // Nothing of the browser is left in the namespace.
    assert!(pid.is_some());
    assert_eq!(browser_pid(&sb.host().name), None);
}

/// A chromium process in namespace `ns`, if any.
fn browser_pid(ns: &str) -> Option<u32> {
    let out = std::process::Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.contains("chrom"))
        })
}
