//! Processes held at exec: released by the tick when the engine never heard of them,
//! and at shutdown.

use super::*;

#[test]
fn holds_the_engine_never_heard_of_are_released_by_the_tick() {
    let mut w = world(Mode::Local);
    w.kernel.borrow_mut().held.insert(42, 0);
    w.engine.tick(Instant::now());
    assert_eq!(w.kernel.borrow().resumed, [42]);
}

#[test]
fn shutdown_resumes_holds_and_detaches_everything() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    w.engine
        .process_seen(proc(11, "/app/shop", 7), Origin::Running);
    w.kernel.borrow_mut().held.insert(99, monotonic_ns());
    assert!(w.engine.shutdown(Instant::now() + Duration::from_secs(1)));
    let k = w.kernel.borrow();
    assert!(k.links.is_empty());
    assert!(k.configs.is_empty());
    assert!(k.resumed.contains(&99));
}

#[test]
fn an_exec_event_of_the_image_already_traced_is_recognized() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    // Found by the startup scan; its exec event (queued before the scan) comes after.
    w.engine
        .process_seen(proc(40, "/app/shop", 7), Origin::Running);
    assert!(w.engine.traces_image(&proc(40, "/app/shop", 7)));
    // A new program in the pid, or another process in a reused pid: not the same image.
    assert!(!w.engine.traces_image(&proc(40, "/app/other", 8)));
    let mut reused = proc(40, "/app/shop", 7);
    reused.start_time += 1;
    assert!(!w.engine.traces_image(&reused));
    assert!(!w.engine.traces_image(&proc(41, "/app/shop", 7)));
    assert_eq!(w.stats.processes().matched, 1);
}
