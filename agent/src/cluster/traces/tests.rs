use super::*;
use crate::events::ProbeMeta;
use gprobe_crds::load_specs;

const TOKEN: &str = "s3cret";

fn spec(name: &str, digest: Option<&str>) -> ProbeSpec {
    let annotations = digest
        .map(|d| format!(", annotations: {{{TOKEN_DIGEST_ANNOTATION}: '{d}'}}"))
        .unwrap_or_default();
    let text = format!(
        "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: {name}, \
         namespace: shop{annotations}}}\nspec:\n  selector: {{images: [x]}}\n  probes: \
         [{{symbol: main.f}}]\n"
    );
    load_specs(&text, "t.yaml").unwrap().remove(0)
}

fn call(spec_key: &str, pid: u32) -> CallRecord {
    CallRecord {
        probe: Arc::new(ProbeMeta::simple(spec_key, "main.f", false)),
        pid,
        tid: pid,
        start_time_unix_nano: 1,
        duration_ns: None,
        args: Vec::new(),
        returns: None,
        resource: Arc::default(),
        unfinished: false,
        span: Default::default(),
    }
}

async fn refusal(traces: &Traces, name: &str, token: Option<&str>) -> (u16, String) {
    match traces.open("shop", name, token).await {
        Ok(_) => panic!("{name}: a stream was opened"),
        Err(r) => (r.code, r.body),
    }
}

async fn next_line(stream: &mut Stream) -> serde_json::Value {
    let chunk = tokio::time::timeout(Duration::from_secs(10), stream.chunks.recv())
        .await
        .expect("a chunk within 10 s")
        .expect("the stream is open");
    serde_json::from_slice(chunk.split(|b| *b == b'\n').next().unwrap()).unwrap()
}

#[test]
fn the_digest_is_the_hex_sha256_of_the_token() {
    assert_eq!(
        token_digest("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[tokio::test(start_paused = true)]
async fn only_the_holder_of_the_token_of_an_annotated_spec_gets_a_stream() {
    let traces = Traces::new("node-a");
    traces.spec_event(&SpecEvent::Upsert(Box::new(spec("plain", None))));
    let digest = token_digest(TOKEN);
    traces.spec_event(&SpecEvent::Upsert(Box::new(spec("t1", Some(&digest)))));

    let (code, body) = refusal(&traces, "plain", Some(TOKEN)).await;
    assert_eq!(code, 403);
    assert!(body.contains("not made by kubectl gprobe trace"), "{body}");
    assert_eq!(refusal(&traces, "t1", Some("guess")).await.0, 403);
    assert_eq!(refusal(&traces, "t1", None).await.0, 403);
    // Time is paused: the wait for a spec never seen ends at once, at its deadline.
    let (code, body) = refusal(&traces, "never", Some(TOKEN)).await;
    assert_eq!(code, 404);
    assert!(body.contains("shop/never on node node-a"), "{body}");

    let mut stream = traces.open("shop", "t1", Some(TOKEN)).await.unwrap();
    assert_eq!(next_line(&mut stream).await["gprobe"], "status");
}

#[tokio::test]
async fn a_request_made_before_the_spec_arrives_waits_for_it() {
    let traces = Traces::new("node-a");
    let early = {
        let t = traces.clone();
        tokio::spawn(async move { t.open("shop", "t1", Some(TOKEN)).await.is_ok() })
    };
    tokio::task::yield_now().await;
    let digest = token_digest(TOKEN);
    traces.spec_event(&SpecEvent::Resync(vec![spec("t1", Some(&digest))]));
    assert!(early.await.unwrap(), "served once the spec came");
}

#[tokio::test]
async fn a_reader_gets_its_specs_calls_only_then_the_end_when_the_spec_is_deleted() {
    let traces = Traces::new("node-a");
    let digest = token_digest(TOKEN);
    traces.spec_event(&SpecEvent::Upsert(Box::new(spec("t1", Some(&digest)))));
    let mut stream = traces.open("shop", "t1", Some(TOKEN)).await.unwrap();
    assert_eq!(next_line(&mut stream).await["gprobe"], "status");

    traces.send(&[
        call("shop/other", 1),
        call("shop/t1", 2),
        call("shop/t1", 3),
    ]);
    let chunk = stream.chunks.recv().await.unwrap();
    let pids: Vec<u64> = chunk
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_slice::<serde_json::Value>(l).unwrap()["pid"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(pids, [2, 3]);

    let spec_t1 = Arc::new(spec("t1", Some(&digest)));
    let attached = ProbeAttachmentStatus {
        links: vec![gprobe_crds::LinkStatus {
            container: "c1".into(),
            pod: "web-1".into(),
            symbol: "main.f".into(),
            state: gprobe_crds::LinkState::Attached,
            message: None,
            hits: 2,
            lost: 0,
            throttled: 0,
            site: None,
        }],
        ..Default::default()
    };
    traces.set_statuses(&[(spec_t1, attached)]);
    assert_eq!(
        next_line(&mut stream).await["status"]["links"][0]["pod"],
        "web-1"
    );
    traces.spec_event(&SpecEvent::Delete {
        namespace: "shop".into(),
        name: "t1".into(),
    });
    let last = next_line(&mut stream).await;
    assert_eq!(last["gprobe"], "status");
    assert_eq!(
        last["status"]["links"][0]["pod"], "web-1",
        "the last status still names what was attached"
    );
    assert_eq!(next_line(&mut stream).await["gprobe"], "end");
    assert!(stream.chunks.recv().await.is_none(), "closed after the end");
    assert_eq!(traces.0.count.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_reader_that_falls_behind_loses_calls_and_is_told_how_many() {
    let traces = Traces::new("node-a");
    let digest = token_digest(TOKEN);
    traces.spec_event(&SpecEvent::Upsert(Box::new(spec("t1", Some(&digest)))));
    let mut stream = traces.open("shop", "t1", Some(TOKEN)).await.unwrap();
    // The status already queued, then more batches than the queue holds, none read.
    for _ in 0..QUEUE_CHUNKS + 9 {
        traces.send(&[call("shop/t1", 2), call("shop/t1", 3)]);
    }
    let mut statuses = 0;
    while let Ok(chunk) = stream.chunks.try_recv() {
        statuses += usize::from(chunk.starts_with(b"{\"gprobe\""));
    }
    assert_eq!(statuses, 1);
    traces.set_statuses(&[]);
    let status = next_line(&mut stream).await;
    assert_eq!(status["dropped"], 2 * 10, "{status}");
}
