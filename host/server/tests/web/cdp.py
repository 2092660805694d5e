#!/usr/bin/env python3
"""Drives a real headless Chromium through the Chrome DevTools Protocol over
--remote-debugging-pipe (fd 3: commands in, fd 4: replies out; JSON messages
ended by NUL), with the standard library only.

    cdp.py CHROMIUM STEPS_JSON

STEPS_JSON is a list of steps, run in order:
    {"goto": URL}                          open URL in the page
    {"wait": JS, "timeout": SECONDS}       poll JS (an expression) until truthy
    {"eval": JS}                           evaluate JS; its JSON value is printed
    {"click": CSS}                         click the first element matching CSS
    {"type": [CSS, TEXT]}                  set the value of the first input matching CSS
    {"reload": true}                       reload the page
    {"screenshot": PATH}                   save a PNG of the page (1280 wide) to PATH
    {"axe": PATH}                          run axe-core (the file at PATH, injected once per
                                           page load) on the page; its serious and critical
                                           violations (a list, empty when none) are a value
    {"key": NAME}                          press a key (Tab, Shift+Tab, Enter) on the focused element
    {"file": [CSS, PATH]}                  choose the file at PATH in the file input matching CSS

JavaScript dialogs (confirm, alert) are accepted, and each is recorded.
Prints {"values": [...], "dialogs": [...]} on success; on failure prints the
reason to stderr and exits 1.
"""
import base64
import json
import select
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


class Browser:
    def __init__(self, chromium):
        self.user_dir = tempfile.mkdtemp(prefix="paceline-cdp-")
        cmd_r, self.cmd_w = os.pipe()
        self.out_r, out_w = os.pipe()

        def wire_pipes():
            # Chromium reads commands on fd 3 and writes replies on fd 4. Go
            # through fds above them first: when a pipe already is fd 3 or 4,
            # dup2 onto itself would keep its close-on-exec flag.
            high_r, high_w = os.dup(cmd_r), os.dup(out_w)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--remote-debugging-pipe", "--user-data-dir=" + self.user_dir, "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=wire_pipes,
            # A group of its own, so that close() ends its helper processes too.
            start_new_session=True)
        os.close(cmd_r)
        os.close(out_w)
        self.buffer = b""
        self.next_id = 0
        self.session = None
        self.dialogs = []
        # Uncaught exceptions and console errors, shown when a step fails.
        self.console = []

    def send(self, method, params=None, session=True, timeout=30):
        self.next_id += 1
        my_id = self.next_id
        message = {"id": my_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.cmd_w, json.dumps(message).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            reply = self.read(deadline)
            if reply is None:
                break
            if reply.get("id") == my_id:
                if "error" in reply:
                    raise RuntimeError("%s: %s" % (method, reply["error"]))
                return reply.get("result", {})
        raise RuntimeError("%s: no reply within %ss" % (method, timeout))

    def read(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.time()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.out_r], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.out_r, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the pipe (exit %s)" % self.proc.poll())
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        message = json.loads(raw)
        if message.get("method") == "Runtime.exceptionThrown":
            details = message["params"].get("exceptionDetails", {})
            self.console.append("exception: %s" % (details.get("exception", {}).get("description") or details.get("text")))
        elif message.get("method") == "Runtime.consoleAPICalled" and message["params"].get("type") in ("error", "warning"):
            self.console.append("console: %s" % " ".join(str(a.get("value", a.get("description", ""))) for a in message["params"].get("args", [])))
        if message.get("method") == "Page.javascriptDialogOpening":
            self.dialogs.append(message["params"].get("message", ""))
            # Answer without waiting: the evaluation that opened it is blocked on it.
            self.next_id += 1
            os.write(self.cmd_w, json.dumps({"id": self.next_id, "method": "Page.handleJavaScriptDialog",
                                             "params": {"accept": True}, "sessionId": message.get("sessionId")}).encode() + b"\0")
            # The reply to that command is skipped by `send` (a different id).
        return message

    def open_page(self):
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, session=False)
        self.session = attached["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")
        # A laptop-sized window: what the screenshots show.
        self.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})

    def evaluate(self, expression, timeout=30):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True,
                                                "userGesture": True}, timeout=timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise RuntimeError("JavaScript error in %r: %s" % (expression, text))
        return result.get("result", {}).get("value")

    def close(self):
        # The whole group: Chromium's network and GPU helpers outlive a kill
        # of the browser process alone and go on writing into the profile.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except Exception:
            pass
        # The profile (about 2.6 MB) is this run's alone; every test run left
        # sixteen of them in /tmp before this. A helper still exiting may
        # write once more, so try again while it comes back.
        for _ in range(20):
            shutil.rmtree(self.user_dir, ignore_errors=True)
            if not os.path.exists(self.user_dir):
                break
            time.sleep(0.1)


KEYS = {"Tab": ("Tab", 9, ""), "Enter": ("Enter", 13, "\r")}

# axe-core's rules for WCAG 2 A and AA; only serious and critical findings fail.
AXE_RUN = """axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa']}}).then(r =>
  r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})))"""


def press(browser, name):
    shift = name.startswith("Shift+")
    key, code, text = KEYS[name.replace("Shift+", "")]
    params = {"key": key, "code": key, "windowsVirtualKeyCode": code, "modifiers": 8 if shift else 0}
    browser.send("Input.dispatchKeyEvent", dict(params, type="keyDown", text=text) if text else dict(params, type="keyDown"))
    browser.send("Input.dispatchKeyEvent", dict(params, type="keyUp"))


def main():
    chromium, steps = sys.argv[1], json.loads(sys.argv[2])
    browser = Browser(chromium)
    values = []
    try:
        browser.open_page()
        for step in steps:
            if "goto" in step:
                browser.send("Page.navigate", {"url": step["goto"]})
            elif "wait" in step:
                deadline = time.time() + step.get("timeout", 20)
                last = None
                while True:
                    try:
                        if browser.evaluate("Boolean(%s)" % step["wait"]):
                            break
                    except RuntimeError as e:
                        last = e
                    if time.time() > deadline:
                        raise RuntimeError("timed out waiting for %s (last error: %s)" % (step["wait"], last))
                    time.sleep(0.2)
            elif "eval" in step:
                values.append(browser.evaluate(step["eval"]))
            elif "click" in step:
                selector = json.dumps(step["click"])
                found = browser.evaluate("(() => { const e = document.querySelector(%s); if (!e) return false; e.click(); return true; })()" % selector)
                if not found:
                    raise RuntimeError("nothing matches %s" % step["click"])
            elif "type" in step:
                selector, text = step["type"]
                found = browser.evaluate("(() => { const e = document.querySelector(%s); if (!e) return false; e.value = %s; return true; })()"
                                         % (json.dumps(selector), json.dumps(text)))
                if not found:
                    raise RuntimeError("nothing matches %s" % selector)
            elif "reload" in step:
                browser.send("Page.reload")
            elif "screenshot" in step:
                shot = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})
                os.makedirs(os.path.dirname(step["screenshot"]), exist_ok=True)
                with open(step["screenshot"], "wb") as f:
                    f.write(base64.b64decode(shot["data"]))
            elif "axe" in step:
                if not browser.evaluate("typeof axe !== 'undefined'"):
                    with open(step["axe"]) as f:
                        browser.evaluate(f.read() + "\n;true")
                values.append(browser.evaluate(AXE_RUN, timeout=60))
            elif "key" in step:
                press(browser, step["key"])
            elif "file" in step:
                selector, path = step["file"]
                root = browser.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
                node = browser.send("DOM.querySelector", {"nodeId": root, "selector": selector}).get("nodeId")
                if not node:
                    raise RuntimeError("nothing matches %s" % selector)
                browser.send("DOM.setFileInputFiles", {"files": [path], "nodeId": node})
            else:
                raise RuntimeError("unknown step %r" % step)
        print(json.dumps({"values": values, "dialogs": browser.dialogs}))
    except Exception as e:
        print("cdp.py: %s" % e, file=sys.stderr)
        try:
            print("page: %s" % browser.evaluate(
                "JSON.stringify({hash: location.hash, error: (document.getElementById('error') || {}).textContent,"
                " text: document.body.innerText.slice(0, 1500)})", timeout=5), file=sys.stderr)
        except Exception as inner:
            print("page unreadable: %s" % inner, file=sys.stderr)
        for line in browser.console[-20:]:
            print(line, file=sys.stderr)
        sys.exit(1)
    finally:
        browser.close()


if __name__ == "__main__":
    main()
