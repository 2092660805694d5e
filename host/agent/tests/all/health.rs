use std::time::Duration;

use paceline_agent::spec::Probe;
use paceline_proto::agent::v1::RunState;

use crate::common::*;

fn healthy_is(want: bool) -> impl Fn(&paceline_proto::agent::v1::StatusUpdate) -> bool {
    move |u| u.healthy == Some(want) && u.reason == "HEALTH_CHANGED"
}

#[tokio::test]
async fn a_command_probe_flips_health_both_ways() {
    let mut h = harness().await;
    let mut s = sh("cmd-1", "sleep 1.5; touch ok; sleep 2.5; rm ok; sleep 60");
    s.health_check =
        Some(health(Probe::Command { command: "test".into(), args: vec!["-f".into(), "ok".into()] }, 1, 1));
    h.sup.launch_spec(s).unwrap();
    let u = wait_for(&mut h.events, "cmd-1", Duration::from_secs(10), healthy_is(false)).await;
    assert_eq!(state(u.last().unwrap()), RunState::Running);
    wait_for(&mut h.events, "cmd-1", Duration::from_secs(10), healthy_is(true)).await;
    wait_for(&mut h.events, "cmd-1", Duration::from_secs(10), healthy_is(false)).await;
    h.sup.kill("cmd-1", Some(1)).unwrap();
    let u = wait_terminal(&mut h.events, "cmd-1", Duration::from_secs(10)).await;
    let last = u.last().unwrap();
    assert_eq!(state(last), RunState::Killed);
    // The terminal update carries the last health.
    assert_eq!(last.healthy, Some(false));
}

#[tokio::test]
async fn a_tcp_probe_sees_a_listening_server() {
    let mut h = harness().await;
    let server = "import os, socket, time\n\
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
time.sleep(1.0)\n\
s.bind(('127.0.0.1', int(os.environ['PORT_DB']))); s.listen(16)\n\
while True:\n    c, _ = s.accept(); c.close()\n";
    let mut s = spec("tcp-1", "python3", &["-c", server]);
    s.port_names = vec!["db".into()];
    s.health_check = Some(health(Probe::Tcp { port: "db".into() }, 1, 1));
    h.sup.launch_spec(s).unwrap();
    // Not listening during its first second: unhealthy, then healthy.
    wait_for(&mut h.events, "tcp-1", Duration::from_secs(10), healthy_is(false)).await;
    wait_for(&mut h.events, "tcp-1", Duration::from_secs(15), healthy_is(true)).await;
    h.sup.kill("tcp-1", Some(1)).unwrap();
    wait_terminal(&mut h.events, "tcp-1", Duration::from_secs(10)).await;
}

#[tokio::test]
async fn an_http_probe_needs_a_good_status() {
    let mut h = harness().await;
    for (run, path, want) in [("web-1", "/", true), ("web-2", "/no-such-page", false)] {
        let mut s = sh(run, r#"exec python3 -m http.server "$PORT_WEB" --bind 127.0.0.1"#);
        s.port_names = vec!["web".into()];
        let mut hc = health(Probe::Http { port: "web".into(), path: path.into() }, 1, 2);
        hc.initial_delay_secs = 1;
        s.health_check = Some(hc);
        h.sup.launch_spec(s).unwrap();
        let u = wait_for(&mut h.events, run, Duration::from_secs(20), |u| u.healthy.is_some()).await;
        let got = u.last().unwrap();
        if want {
            // The server may need more than the initial delay to start.
            if got.healthy != Some(true) {
                wait_for(&mut h.events, run, Duration::from_secs(20), healthy_is(true)).await;
            }
        } else {
            assert_eq!(got.healthy, Some(false), "{got:?}");
            assert!(got.message.contains("404"), "{}", got.message);
        }
        h.sup.kill(run, Some(1)).unwrap();
        wait_terminal(&mut h.events, run, Duration::from_secs(10)).await;
    }
}
