//! A real browser for the tests of the node agent's page: Debian's `chromium`, headless, in a
//! test namespace, driven over the DevTools protocol through `--remote-debugging-pipe` (the
//! browser reads commands on descriptor 3 and writes answers and events on descriptor 4, each
//! a JSON message ended by a NUL byte): no TCP port, no WebDriver, nothing downloaded. It
//! loads one page, evaluates JavaScript in it (to wait for the data and read the DOM) and
//! takes screenshots. The browser's profile is a fresh directory removed with it; the browser
//! is killed (by its process id) when dropped.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use command_fds::{CommandFdExt, FdMapping};
use serde_json::{json, Value};

/// Where Debian's package puts the browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// One headless browser showing one page.
pub struct Browser {
    child: Child,
    to_browser: File,
    from_browser: mpsc::Receiver<Value>,
    next_id: u64,
    session: String,
    _profile: tempdir::Dir,
}

/// A fresh directory removed on drop (the browser's profile).
mod tempdir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> std::io::Result<Dir> {
            let path = std::env::temp_dir().join(format!(
                "rcni-browser-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            ));
            std::fs::create_dir(&path)?;
            Ok(Dir(path))
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Browser {
    /// Whether the browser is installed (a test without it skips, naming it).
    pub fn available() -> bool {
        Path::new(CHROMIUM).exists()
    }

    /// Starts the browser in network namespace `ns` on `url`, a window of `width` x `height`.
    pub fn open(ns: &str, url: &str, width: u32, height: u32) -> anyhow::Result<Browser> {
        let profile = tempdir::Dir::new().context("browser profile directory")?;
        let (cmd_read, cmd_write) = nix::unistd::pipe().context("pipe")?;
        let (out_read, out_write) = nix::unistd::pipe().context("pipe")?;
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", ns, CHROMIUM])
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
            .fd_mappings(vec![
                FdMapping {
                    parent_fd: cmd_read,
                    child_fd: 3,
                },
                FdMapping {
                    parent_fd: out_write,
                    child_fd: 4,
                },
            ])
            .map_err(|e| anyhow!("map the browser's pipes: {e:?}"))?;
        let child = command.spawn().context("start chromium")?;
        // The command holds the child's ends; dropping it closes them here, so a browser that
        // dies ends the reader.
        drop(command);
        let from_browser = reader(out_read);
        let mut browser = Browser {
            child,
            to_browser: File::from(cmd_write),
            from_browser,
            next_id: 0,
            session: String::new(),
            _profile: profile,
        };
        browser.session = browser.attach(url)?;
        Ok(browser)
    }

    /// Attaches to the page target showing `url`; its session.
    fn attach(&mut self, url: &str) -> anyhow::Result<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let target = loop {
            let targets = self.call(None, "Target.getTargets", json!({}))?;
            let page = targets["targetInfos"].as_array().and_then(|ts| {
                ts.iter()
                    .find(|t| t["type"] == "page")
                    .and_then(|t| t["targetId"].as_str().map(str::to_string))
            });
            match page {
                Some(id) => break id,
                None if Instant::now() > deadline => bail!("chromium opened no page for {url}"),
                None => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        )?;
        attached["sessionId"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("no session: {attached}"))
    }

    /// Sends one command and waits for its answer (events in between are skipped).
    fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> anyhow::Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .with_context(|| format!("send {method} to chromium"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = self
                .from_browser
                .recv_timeout(left)
                .map_err(|_| anyhow!("chromium did not answer {method}"))?;
            if answer["id"] != id {
                continue;
            }
            if let Some(e) = answer.get("error") {
                bail!("chromium: {method}: {e}");
            }
            return Ok(answer["result"].clone());
        }
    }

    /// Evaluates `expression` in the page; its value (promises awaited).
    pub fn eval(&mut self, expression: &str) -> anyhow::Result<Value> {
        let session = self.session.clone();
        let r = self.call(
            Some(&session),
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        )?;
        if let Some(e) = r.get("exceptionDetails") {
            bail!("{expression}: {e}");
        }
        Ok(r["result"]["value"].clone())
    }

    /// Evaluates `expression` until it gives something other than null, false, 0 or ""
    /// (within `timeout`); that value.
    pub fn wait_for(&mut self, expression: &str, timeout: Duration) -> anyhow::Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(expression)?;
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("{expression} still {v} after {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of the page as shown, written to `path`.
    pub fn screenshot(&mut self, path: &Path) -> anyhow::Result<PathBuf> {
        let session = self.session.clone();
        let r = self.call(
            Some(&session),
            "Page.captureScreenshot",
            json!({"format": "png"}),
        )?;
        let data = r["data"].as_str().ok_or_else(|| anyhow!("no screenshot"))?;
        use base64::Engine;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .context("screenshot base64")?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png).with_context(|| format!("write {}", path.display()))?;
        Ok(path.to_path_buf())
    }
}

/// A thread reading the browser's NUL-ended messages into a channel.
fn reader(from: OwnedFd) -> mpsc::Receiver<Value> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(File::from(from));
        let mut buf = Vec::new();
        while matches!(r.read_until(0, &mut buf), Ok(n) if n > 0) {
            if buf.last() == Some(&0) {
                buf.pop();
            }
            if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                if tx.send(v).is_err() {
                    return;
                }
            }
            buf.clear();
        }
    });
    rx
}

impl Drop for Browser {
    /// Asks the browser to close (it takes its helper processes with it), and kills it if
    /// it has not within 5 s.
    fn drop(&mut self) {
        let _ = self.call(None, "Browser.close", json!({}));
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
