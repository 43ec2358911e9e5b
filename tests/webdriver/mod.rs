//! A small WebDriver client (the W3C protocol over HTTP: sessions, navigation,
//! elements, scripts, screenshots) driving Debian's `chromedriver` and
//! headless `chromium`, and the check that both are installed.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// The key of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// What is missing to run browser tests, if anything.
pub fn missing() -> Option<String> {
    let absent: Vec<&str> = ["chromium", "chromedriver"]
        .into_iter()
        .filter(|program| !Command::new("sh").arg("-c").arg(format!("command -v {program}")).stdout(Stdio::null()).status().is_ok_and(|s| s.success()))
        .collect();
    (!absent.is_empty()).then(|| format!("{} not installed (Debian packages chromium and chromium-driver)", absent.join(" and ")))
}

/// A headless Chromium under chromedriver; both stop when it is dropped.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::blocking::Client,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium session
    /// with a `width`×`height` window.
    pub fn start(width: u32, height: u32) -> Browser {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        // A bound against a hung browser, not a speed check: on a loaded
        // 2-core machine one WebDriver call over a page of 1,000 live
        // members has taken over a minute.
        let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(180)).build().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while http.get(format!("{base}/status")).send().map(|r| !r.status().is_success()).unwrap_or(true) {
            assert!(Instant::now() < deadline, "chromedriver did not answer");
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut browser = Browser { driver, base, session: String::new(), http };
        let args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", &format!("--window-size={width},{height}")];
        let capabilities = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {"args": args}}}});
        let created = browser.call("POST", "/session", Some(capabilities));
        browser.session = created["sessionId"].as_str().expect("a session id").to_string();
        browser
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = if path == "/session" { format!("{}{path}", self.base) } else { format!("{}/session/{}{path}", self.base, self.session) };
        let request = match method {
            "POST" => self.http.post(&url).json(&body.unwrap_or(json!({}))),
            "DELETE" => self.http.delete(&url),
            _ => self.http.get(&url),
        };
        let response = request.send().unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"));
        let code = response.status();
        let value: Value = response.json().unwrap_or(Value::Null);
        assert!(code.is_success(), "WebDriver {method} {path}: {code} {value}");
        value["value"].clone()
    }

    /// Opens `url`.
    pub fn open(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url})));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub fn script(&self, script: &str, args: Value) -> Value {
        self.call("POST", "/execute/sync", Some(json!({"script": script, "args": args})))
    }

    /// The element `css` selects (the first), if any.
    pub fn find(&self, css: &str) -> Option<String> {
        let found = self.call("POST", "/elements", Some(json!({"using": "css selector", "value": css})));
        found.as_array()?.first()?.get(ELEMENT)?.as_str().map(str::to_string)
    }

    /// Types `text` into the element `css` selects.
    pub fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).unwrap_or_else(|| panic!("no element {css}"));
        self.call("POST", &format!("/element/{element}/clear"), None);
        self.call("POST", &format!("/element/{element}/value"), Some(json!({"text": text})));
    }

    /// Clicks the element `css` selects.
    pub fn click(&self, css: &str) {
        let element = self.find(css).unwrap_or_else(|| panic!("no element {css}"));
        self.call("POST", &format!("/element/{element}/click"), None);
    }

    /// The visible text of the element `css` selects ("" when there is none).
    pub fn text(&self, css: &str) -> String {
        self.script("const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", json!([css])).as_str().unwrap_or_default().to_string()
    }

    /// The texts of every element `css` selects.
    pub fn texts(&self, css: &str) -> Vec<String> {
        let found = self.script("return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText);", json!([css]));
        found.as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()).unwrap_or_default()
    }

    /// Waits up to `limit` for `check`, panicking with `what` and the page's text.
    pub fn wait(&self, limit: Duration, what: &str, mut check: impl FnMut(&Browser) -> bool) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if check(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("timed out waiting for {what}; the page shows:\n{}", self.text("body"));
    }

    /// A PNG screenshot of the window.
    pub fn screenshot(&self) -> Vec<u8> {
        let encoded = self.call("GET", "/screenshot", None);
        base64::engine::general_purpose::STANDARD.decode(encoded.as_str().unwrap_or_default()).expect("a base64 PNG")
    }

    /// Writes a screenshot to `path`.
    pub fn save_screenshot(&self, path: &Path) {
        std::fs::write(path, self.screenshot()).expect("screenshot written");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.http.delete(format!("{}/session/{}", self.base, self.session)).send();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
