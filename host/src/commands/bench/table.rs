//! The table `wprof bench` prints: one block per group of figures, one row per module.

use std::path::Path;

use crate::settings::Mode;

use super::BenchReport;
use crate::display::format_ns;

fn file_name(module: &str) -> String {
    Path::new(module)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| module.to_string())
}

fn ratio(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.2}x")).unwrap_or_else(|| "-".into())
}

fn time(t: Option<u64>) -> String {
    t.map(format_ns).unwrap_or_else(|| "-".into())
}

pub(super) fn table(report: &BenchReport, runs: u32) -> String {
    use std::fmt::Write;
    let rows = &report.modules;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "median of {runs} run(s), runs interleaved\n\n\
         `_start` wall time in this process (one engine, compilation excluded); \
         ratio = instrumented / original; `{}`: sample mode with --live, every switch off; \
         `{}`: sample mode with --coverage; `{}`: sample mode with --allocs; \
         `{}`: time mode with --trace (the file's writing excluded)",
        super::overhead::LIVE_OFF,
        super::overhead::COVERAGE,
        super::overhead::ALLOCS,
        super::overhead::TRACE
    );
    let _ = write!(out, "{:<20} {:>10}", "module", "original");
    // In this process: the modes that instrument (stack mode is the original's run).
    let names = wprof_agent::ProbeMode::ALL
        .iter()
        .map(|mode| format!("{} mode", mode.name()))
        .chain([
            super::overhead::LIVE_OFF.to_string(),
            super::overhead::COVERAGE.to_string(),
            super::overhead::ALLOCS.to_string(),
            super::overhead::TRACE.to_string(),
        ]);
    for name in names {
        let _ = write!(out, " {:>12} {:>7}", name, "ratio");
    }
    out.push('\n');
    for r in rows {
        let _ = write!(
            out,
            "{:<20} {:>10}",
            file_name(&r.module),
            format_ns(r.original)
        );
        for m in &r.modes {
            let _ = write!(out, " {:>12} {:>6.2}x", format_ns(m.instrumented), m.ratio);
        }
        out.push('\n');
    }

    let _ = writeln!(
        out,
        "\nwhole process wall time, spawn to exit, compilation included (nothing cached)"
    );
    match &report.wasmtime_cli {
        Some(v) => {
            let path = report
                .wasmtime_cli_path
                .as_deref()
                .unwrap_or(Path::new("wasmtime"));
            let _ = writeln!(
                out,
                "wasmtime CLI: {v} ({}); wprof embeds wasmtime {}",
                path.display(),
                crate::prepare::artifacts::WASMTIME_VERSION
            );
            if report.wasmtime_cli_is_script {
                let _ = writeln!(
                    out,
                    "warning: that wasmtime is a script (a shim?): its interpreter's start-up is \
                     in every wasmtime time; set WASMTIME_CLI to the binary"
                );
            }
        }
        None => {
            let _ = writeln!(
                out,
                "the wasmtime CLI is not installed (WASMTIME_CLI, or wasmtime on PATH): \
                 no reference, only wprof with WPROF=0 is timed"
            );
        }
    }
    let _ = writeln!(
        out,
        "{:<20} {:>13} {:>16} {:>7} {:>14} {:>14}",
        "module", "wasmtime run", "--profile=guest", "ratio", "wprof WPROF=0", "/wasmtime run"
    );
    for r in rows {
        let p = &r.process;
        let _ = writeln!(
            out,
            "{:<20} {:>13} {:>16} {:>7} {:>14} {:>14}",
            file_name(&r.module),
            time(p.wasmtime_run),
            time(p.wasmtime_profile_guest),
            ratio(p.profile_guest_ratio),
            format_ns(p.wprof_off),
            ratio(p.wprof_off_ratio),
        );
    }

    let _ = writeln!(
        out,
        "\nwhole process wall time, caches warm: `wprof run -q` per mode against `wasmtime run` \
         with its compilation cache;\nown = wprof's time outside the guest (process minus \
         `_start`), phases = the part of it wprof times itself (`--timings`)"
    );
    let _ = write!(
        out,
        "{:<20} {:>13} {:>14} {:>7}",
        "module", "wasmtime run", "wprof WPROF=0", "ratio"
    );
    for mode in Mode::ALL {
        let _ = write!(
            out,
            " {:>12} {:>7} {:>10} {:>10}",
            format!("{} mode", mode.name()),
            "ratio",
            "own",
            "phases"
        );
    }
    out.push('\n');
    for r in rows {
        let p = &r.process;
        let _ = write!(
            out,
            "{:<20} {:>13} {:>14} {:>7}",
            file_name(&r.module),
            time(p.wasmtime_run_warm),
            format_ns(p.wprof_off_warm),
            ratio(p.wprof_off_warm_ratio)
        );
        for m in &p.profiled {
            let _ = write!(
                out,
                " {:>12} {:>7} {:>10} {:>10}",
                format_ns(m.wall),
                ratio(m.ratio),
                format_ns(m.own),
                format_ns(m.own_phases)
            );
        }
        out.push('\n');
    }

    let _ = writeln!(
        out,
        "\nstart-up up to `_start` (time mode); ratios to compiling the original"
    );
    let _ = writeln!(
        out,
        "{:<20} {:>10} {:>10} {:>10} {:>10} {:>7} {:>7} {:>8}",
        "module", "compile", "cold", "warm", "changed", "cold/", "warm/", "changed/"
    );
    for r in rows {
        let s = &r.startup;
        let of = |t: u64| t as f64 / s.compile_original.max(1) as f64;
        let _ = writeln!(
            out,
            "{:<20} {:>10} {:>10} {:>10} {:>10} {:>6.2}x {:>6.2}x {:>7.2}x",
            file_name(&r.module),
            format_ns(s.compile_original),
            format_ns(s.cold),
            format_ns(s.warm),
            format_ns(s.changed),
            of(s.cold),
            of(s.warm),
            of(s.changed),
        );
    }
    let _ = writeln!(
        out,
        "\ninstrumenting a cold module (every function, no cache) against a walrus parse + emit \
         (speed = walrus / agent, goal >= 0.8x);\n\
         every function's key and cache lookup in a warm cache (keys: computing them), what \
         they would add to a warm start (goal < 5%;\n\
         an unchanged module's warm start does none: its manifest hits) and their share of \
         the one-function-changed start, where they run"
    );
    let _ = writeln!(
        out,
        "{:<20} {:>9} {:>9} {:>10} {:>10} {:>7} {:>10} {:>10} {:>8} {:>8}",
        "module",
        "functions",
        "code",
        "agent",
        "walrus",
        "speed",
        "lookups",
        "keys",
        "of warm",
        "changed"
    );
    for r in rows {
        let s = &r.startup;
        let _ = writeln!(
            out,
            "{:<20} {:>9} {:>9} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7.1}% {:>7.1}%",
            file_name(&r.module),
            s.functions,
            crate::display::format_size(s.code_bytes),
            format_ns(s.instrument),
            time(s.walrus),
            ratio(s.instrument_speed),
            format_ns(s.lookups),
            format_ns(s.lookup_keys),
            s.lookup_share * 100.0,
            s.lookup_share_of_changed * 100.0,
        );
    }
    for r in rows {
        for a in &r.accuracy {
            let _ = writeln!(
                out,
                "\naccuracy on {}: self-time ratio {} expected {}: raw {:.3} (error {:.1}%), \
                 overhead subtracted {:.3} (error {:.1}%)",
                r.module,
                a.functions,
                a.expected,
                a.raw,
                a.raw_error * 100.0,
                a.subtracted,
                a.subtracted_error * 100.0
            );
        }
    }
    out
}
