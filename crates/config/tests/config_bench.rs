//! `[bench.hdd]` / `[bench.ssd]` (the simulated disk models of `nbraid bench --sim`) and
//! `--sim-params` files: read in file order, and every bad key or value refused at its
//! file:line:column naming the table and key.

mod common;

use common::expect;
use nbraid_config::{self as config, BenchModels, ConfigError, ErrorKind, HDD_PARAMS, SSD_PARAMS};
use std::path::Path;

/// One RAM member and a JBOD over it (lines 1-8), then `rest` from line 9.
const ARRAY: &str = r#"[[member]]
id = "m0"
path = "memory:"
size = "64MiB"
[[volume]]
name = "v"
level = "jbod"
members = ["m0"]
"#;

fn models(rest: &str) -> BenchModels {
    common::check(&format!("{ARRAY}{rest}"))
        .unwrap_or_else(|e| panic!("{e}"))
        .bench
}

fn err(rest: &str) -> ConfigError {
    common::refused(&format!("{ARRAY}{rest}"))
}

#[test]
fn a_config_without_the_tables_has_no_models() {
    assert_eq!(models(""), BenchModels::default());
    // An empty table is there (the defaults), unlike a missing one.
    let m = models("[bench.hdd]\n");
    assert!(m.hdd.as_ref().is_some_and(|p| p.is_empty()));
    assert!(m.ssd.is_none());
}

#[test]
fn model_tables_are_read_in_file_order() {
    let m = models(
        "[bench.hdd]\nrpm = 7200\nfull_stroke_ms = 12.5\nqueue_depth = 1\n\
         [bench.ssd]\nread_iops = 50_000\nwrite_latency_us = 0\n",
    );
    let hdd: Vec<(&str, f64)> = m.hdd.as_ref().unwrap().iter().collect();
    assert_eq!(
        hdd,
        [
            ("rpm", 7200.0),
            ("full_stroke_ms", 12.5),
            ("queue_depth", 1.0)
        ]
    );
    let ssd = m.model("ssd").unwrap();
    assert_eq!(ssd.get("read_iops"), Some(50_000.0));
    assert_eq!(ssd.get("write_latency_us"), Some(0.0));
    assert_eq!(ssd.get("read_mb_s"), None);
    assert!(m.model("tape").is_none());
    // Inline and dotted forms are the same tables.
    let inline = "bench = { hdd = { rpm = 7200, full_stroke_ms = 12.5, queue_depth = 1 } }\n";
    let inline = config::parse(&format!("{inline}{ARRAY}"), Path::new("a.toml")).unwrap();
    assert_eq!(inline.bench.hdd, m.hdd);
    let dotted =
        models("[bench]\nhdd.rpm = 7200\nhdd.full_stroke_ms = 12.5\nhdd.queue_depth = 1\n");
    assert_eq!(dotted.hdd, m.hdd);
}

#[test]
fn every_key_at_its_bounds_is_accepted() {
    for (table, specs) in [("hdd", &HDD_PARAMS[..]), ("ssd", &SSD_PARAMS[..])] {
        for bound in [|s: &config::ParamSpec| s.min, |s: &config::ParamSpec| s.max] {
            let body: String = specs
                .iter()
                .map(|s| format!("{} = {:?}\n", s.key, bound(s)))
                .collect();
            let m = models(&format!("[bench.{table}]\n{body}"));
            let got: Vec<(&str, f64)> = m.model(table).unwrap().iter().collect();
            let want: Vec<(&str, f64)> = specs.iter().map(|s| (s.key, bound(s))).collect();
            assert_eq!(got, want);
        }
    }
}

#[test]
fn an_unknown_key_is_located_and_the_right_one_suggested() {
    let e = err("[bench.hdd]\nrpm = 7200\nrpms = 7200\n");
    expect(
        &e,
        ErrorKind::Schema,
        "configs/bad.toml:11:1: bench.hdd: unknown key `rpms`; valid: rpm, track_to_track_ms, ",
        &["did you mean `rpm`?"],
    );
    let e = err("[bench.ssd]\nread_iops = 1000\nrpm = 7200\n");
    expect(
        &e,
        ErrorKind::Schema,
        "configs/bad.toml:11:1: bench.ssd: unknown key `rpm`; valid: read_latency_us, ",
        &[],
    );
    assert!(!e.to_string().contains("did you mean"), "{e}");
}

#[test]
fn an_unknown_model_or_a_key_outside_one_is_a_schema_error() {
    let e = err("[bench.hdx]\nrpm = 7200\n");
    expect(
        &e,
        ErrorKind::Schema,
        "configs/bad.toml:9:8: bench: unknown key `hdx`; bench holds the simulated models' tables, \
         [bench.hdd] and [bench.ssd]; did you mean `hdd`?",
        &[],
    );
    let e = err("[bench]\nrpm = 7200\n");
    expect(
        &e,
        ErrorKind::Schema,
        "configs/bad.toml:10:1: bench: unknown key `rpm`; bench holds",
        &[],
    );
    assert!(!e.to_string().contains("did you mean"), "{e}");
    let e = err("[bench]\nhdd = 7200\n");
    expect(
        &e,
        ErrorKind::Schema,
        "configs/bad.toml:10:7: hdd: invalid type: integer `7200`, expected a table",
        &[],
    );
}

#[test]
fn a_bad_value_is_located_with_its_range_and_unit() {
    let e = err("[bench.hdd]\nqueue_depth = 1\nrpm = 0\n");
    expect(
        &e,
        ErrorKind::Model,
        "configs/bad.toml:11:7: bench.hdd: rpm 0 is out of range; give 1 to 1000000 (revolutions per minute)",
        &[],
    );
    let e = err("[bench.hdd]\nfull_stroke_ms = \"12ms\"\n");
    expect(
        &e,
        ErrorKind::Model,
        "configs/bad.toml:10:18: bench.hdd: full_stroke_ms \"12ms\" is not a number; give 0 to 60000 (ms)",
        &[],
    );
    let e = err("[bench.hdd]\nqueue_depth = 1.5\n");
    expect(
        &e,
        ErrorKind::Model,
        "configs/bad.toml:10:15: bench.hdd: queue_depth 1.5 is not a whole number; give 1 to 65536 (commands)",
        &[],
    );
    let e = err("[bench.ssd]\nread_mb_s = -550\n");
    expect(
        &e,
        ErrorKind::Model,
        "configs/bad.toml:10:13: bench.ssd: read_mb_s -550 is out of range; give 0.01 to 1000000",
        &[],
    );
    // A quoted key, a key in a dotted table, a dotted key making a table.
    let e = err("[bench.hdd]\n\"rpm\" =\t-1\n");
    expect(
        &e,
        ErrorKind::Model,
        "configs/bad.toml:10:9: bench.hdd: rpm -1 is out of range",
        &[],
    );
    let e = err("[bench]\nhdd.rpm = 0\n");
    expect(
        &e,
        ErrorKind::Model,
        "configs/bad.toml:10:11: bench.hdd: rpm 0 is out of range",
        &[],
    );
    let e = err("[bench.hdd]\nrpm.x = 1\n");
    expect(
        &e,
        ErrorKind::Model,
        "configs/bad.toml:10:1: bench.hdd: rpm (a table) is not a number",
        &[],
    );
    for v in ["nan", "inf", "-inf", "1e300", "true", "[1]"] {
        let e = err(&format!("[bench.ssd]\nread_latency_us = {v}\n"));
        expect(
            &e,
            ErrorKind::Model,
            "configs/bad.toml:10:19: bench.ssd: read_latency_us ",
            &[],
        );
    }
    let e = err("[bench.ssd]\nread_latency_us = 1e300\n");
    assert!(
        e.to_string()
            .contains("read_latency_us 1e300 is out of range; give 0 to 60000000 (µs)"),
        "{e}"
    );
}

#[test]
fn a_sim_params_file_is_checked_the_same_way() {
    let file = Path::new("sim.toml");
    let m = config::parse_sim_params("[hdd]\nqueue_depth = 1\n[ssd]\n", file).unwrap();
    assert_eq!(m.hdd.unwrap().get("queue_depth"), Some(1.0));
    assert!(m.ssd.unwrap().is_empty());
    let e = config::parse_sim_params("[hdd]\nqueue_depth = 0\n", file).unwrap_err();
    expect(
        &e,
        ErrorKind::Model,
        "sim.toml:2:15: hdd: queue_depth 0 is out of range; give 1 to 65536",
        &[],
    );
    let e = config::parse_sim_params("[hdd]\nrpms = 7200\n", file).unwrap_err();
    expect(
        &e,
        ErrorKind::Schema,
        "sim.toml:2:1: hdd: unknown key `rpms`",
        &["did you mean `rpm`?"],
    );
    let e = config::parse_sim_params("[sdd]\n", file).unwrap_err();
    expect(
        &e,
        ErrorKind::Schema,
        "sim.toml:1:2: unknown table `sdd`; a --sim-params file holds the simulated models' \
         tables, [hdd] and [ssd]; did you mean `hdd`?",
        &[],
    );
    let e = config::parse_sim_params("[hdd\n", file).unwrap_err();
    expect(&e, ErrorKind::Syntax, "sim.toml:1:", &["not valid TOML"]);

    // The one-command drive of docs/benchmarks.
    let docs = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/benchmarks/hdd-one-command.toml"
    );
    let m = config::load_sim_params(docs).unwrap();
    assert_eq!(
        m.hdd.unwrap().iter().collect::<Vec<_>>(),
        [("queue_depth", 1.0)]
    );
    assert!(config::load_sim_params("/nonexistent/sim.toml").is_err());
}
