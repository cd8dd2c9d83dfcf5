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
