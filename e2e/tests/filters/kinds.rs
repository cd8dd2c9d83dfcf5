//! Terms on integers of every size and sign, on fields of a struct passed by value, and on
//! a []byte, a map and a bool that Go's register ABI puts on the stack:
//! e2e/testdata/filters's `main.kinds`, on both builds.

use super::go::{builds, what, SRC};
use super::{assert_kept, spec, trace, Case};
use gprobe_crds::ProbeSpec;
use gprobe_e2e::harness::{program, program_lines, require_trace};
use gprobe_e2e::spec::ProbeBuilder;
use serde_json::Value;

const KINDS: &str = "main.kinds";
const KINDS_SIGNATURE: &str = "func(id int64, p main.Point, small int8, u16 uint16, big uint64, \
                               b byte, body []byte, m map[string]int, flag bool) int";

/// One call of `main.kinds`, as the program printed it.
#[derive(Debug)]
struct Kinds {
    id: i64,
    x: i64,
    y: i64,
    small: i64,
    u16: u64,
    big: u64,
    b: u64,
    body: String,
    map: bool,
    len: i64,
    flag: bool,
}

fn kinds_calls(out: &str) -> Vec<Kinds> {
    program_lines(out, "kinds ")
        .iter()
        .map(|l| Kinds {
            id: l["id"].parse().unwrap(),
            x: l["x"].parse().unwrap(),
            y: l["y"].parse().unwrap(),
            small: l["small"].parse().unwrap(),
            u16: l["u16"].parse().unwrap(),
            big: l["big"].parse().unwrap(),
            b: l["b"].parse().unwrap(),
            body: l["body"].clone(),
            map: l["map"].parse().unwrap(),
            len: l["len"].parse().unwrap(),
            flag: l["flag"].parse().unwrap(),
        })
        .collect()
}

#[test]
fn integers_of_every_size_and_sign_struct_fields_and_values_on_the_stack() {
    require_trace("kinds");
    let cases: [Case<Kinds>; 13] = [
        Case {
            name: "int8",
            when: "small < 0 && small > -100",
            keep: |k| k.small < 0 && k.small > -100,
        },
        Case {
            // -128..127: 200 is out of range, so only the second term can hold.
            name: "int8-range",
            when: "small == 200 || small >= 100",
            keep: |k| k.small >= 100,
        },
        Case {
            name: "uint16",
            when: "u16 > 40000",
            keep: |k| k.u16 > 40000,
        },
        Case {
            name: "uint64-top-bit",
            when: "big > 9223372036854775807",
            keep: |k| k.big > i64::MAX as u64,
        },
        Case {
            // -1 is no uint64: never equal.
            name: "uint64-eq",
            when: "(big == 9223372036854775813 || big == 4 || big == -1) && big != -1",
            keep: |k| k.big == 9223372036854775813 || k.big == 4,
        },
        Case {
            name: "byte",
            when: "b >= 200",
            keep: |k| k.b >= 200,
        },
        Case {
            name: "struct-fields",
            when: "p.X < 0 || p.Y >= 90",
            keep: |k| k.x < 0 || k.y >= 90,
        },
        Case {
            name: "bytes-prefix",
            when: r#"hasPrefix(body, "GET")"#,
            keep: |k| k.body.starts_with("GET"),
        },
        Case {
            name: "bytes-eq",
            when: r#"body == "GET" || body == "POST:/y""#,
            keep: |k| k.body == "GET" || k.body == "POST:/y",
        },
        Case {
            name: "map-nil",
            when: "m == nil",
            keep: |k| !k.map,
        },
        Case {
            // A nil map's length is 0.
            name: "map-len",
            when: "len(m) == 0",
            keep: |k| k.len == 0,
        },
        Case {
            name: "bool-on-stack",
            when: "flag && len(m) >= 1",
            keep: |k| k.flag && k.len >= 1,
        },
        Case {
            name: "not-bool-on-stack",
            when: "!flag",
            keep: |k| !k.flag,
        },
    ];
    for (v, stripped) in builds() {
        let what = what(v, stripped);
        let bin = program(SRC, v, stripped);
        let specs: Vec<ProbeSpec> = cases
            .iter()
            .map(|c| {
                let p = ProbeBuilder::new(KINDS).capture(["id"]).when(c.when);
                let p = if stripped {
                    p.signature(KINDS_SIGNATURE)
                } else {
                    p
                };
                spec(c.name, &bin, p)
            })
            .collect();
        let (run, out) = trace(&specs, &bin, &["-n", "70"]);
        let calls = kinds_calls(&out);
        assert_eq!(calls.len(), 70, "{out}");
        let ids: Vec<(String, String)> = calls
            .iter()
            .map(|k| (k.id.to_string(), format!("{k:?}")))
            .collect();
        let id_of = |r: &Value| r["args"]["id"].as_i64().unwrap().to_string();
        for c in &cases {
            let kept: Vec<bool> = calls.iter().map(c.keep).collect();
            assert!(
                kept.iter().any(|k| *k) && !kept.iter().all(|k| *k),
                "{what}: {:?} holds for all or none of the calls: the case proves nothing",
                c.when
            );
            let what = format!("{what}, when: {}", c.when);
            assert_kept(&run, KINDS, c.name, &ids, &kept, id_of, &what);
        }
    }
}
