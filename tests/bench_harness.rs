//! CPU tests of the fused benchmark's pure parts (`weft_kit::bench`: options, statistics, report, plot).

use weft_kit::bench::{options, plot, report, stats};

mod options_tests {
    use std::path::PathBuf;

    use crate::options::*;

    fn options(pairs: &[(&str, &str)]) -> Result<Options, String> {
        Options::from_lookup(|name| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_string()))
    }

    #[test]
    fn defaults_are_every_power_of_four_from_4_kb_to_256_mb_in_both_types() {
        let defaults = options(&[]).unwrap();
        assert!(!defaults.quick);
        assert_eq!(defaults.cases, None);
        assert_eq!(defaults.dtypes, vec![Dtype::F32, Dtype::Bf16]);
        let shown: Vec<String> = defaults.sizes.iter().map(|&b| format_size(b)).collect();
        assert_eq!(shown, ["4 KB", "16 KB", "64 KB", "256 KB", "1 MB", "4 MB", "16 MB", "64 MB", "256 MB"]);
        assert_eq!(defaults.out_dir, PathBuf::from("target/bench"));
        assert_eq!(defaults.limit_gbps, None);
        assert_eq!(defaults.settle, None);
        assert_eq!(defaults.limit_for(1, 1), 4300.0, "one rank: the GPU's copy rate");
        assert_eq!(defaults.limit_for(8, 1), 450.0, "several ranks: NVLink per direction per GPU");
        assert_eq!(defaults.limit_for(8, 8), 537.5, "ranks sharing a GPU: their share of its copy rate");
    }

    #[test]
    fn quick_runs_three_sizes_and_few_iterations() {
        let quick = options(&[("WEFT_BENCH_QUICK", "1")]).unwrap();
        assert_eq!(quick.sizes, vec![64 << 10, 4 << 20, 64 << 20]);
        assert!(quick.iterations(64 << 20) <= 10 && quick.warmup() <= 3);
        let full = options(&[("WEFT_BENCH_QUICK", "0")]).unwrap();
        assert!(full.iterations(4 << 10) >= full.iterations(256 << 20));
        assert!(full.iterations(256 << 20) >= 20, "medians need enough samples");
    }

    #[test]
    fn lists_are_parsed_and_trimmed() {
        let o = options(&[
            ("WEFT_BENCH_CASES", " allreduce, rmsnorm ,"),
            ("WEFT_BENCH_DTYPES", "BF16"),
            ("WEFT_BENCH_SIZES", "4K,1MB, 2g"),
            ("WEFT_BENCH_OUT", "/tmp/x"),
            ("WEFT_BENCH_LIMIT_GBPS", "900"),
            ("WEFT_BENCH_SETTLE_S", " 20 "),
        ])
        .unwrap();
        assert_eq!(o.settle, Some(std::time::Duration::from_secs(20)));
        assert_eq!(o.cases, Some(vec!["allreduce".to_string(), "rmsnorm".to_string()]));
        assert_eq!(o.dtypes, vec![Dtype::Bf16]);
        assert_eq!(o.sizes, vec![4096, 1 << 20, 2 << 30]);
        assert_eq!(o.out_dir, PathBuf::from("/tmp/x"));
        assert_eq!(o.limit_gbps, Some(900.0));
        assert_eq!((o.limit_for(1, 1), o.limit_for(8, 1), o.limit_for(8, 8)), (900.0, 900.0, 900.0));
        assert!(o.selects("rmsnorm") && !o.selects("moe_dispatch"));
        assert_eq!(o.unknown_cases(&["allreduce"]), vec!["rmsnorm"]);
        assert!(options(&[]).unwrap().selects("anything"));
    }

    #[test]
    fn bad_knobs_are_errors_that_name_the_variable() {
        for (name, value) in [
            ("WEFT_BENCH_QUICK", "maybe"),
            ("WEFT_BENCH_DTYPES", "f16"),
            ("WEFT_BENCH_SIZES", "12 parsecs"),
            ("WEFT_BENCH_SIZES", "0"),
            ("WEFT_BENCH_SIZES", ","),
            ("WEFT_BENCH_LIMIT_GBPS", "-3"),
            ("WEFT_BENCH_SETTLE_S", "0"),
            ("WEFT_BENCH_SETTLE_S", "1.5"),
        ] {
            let error = options(&[(name, value)]).unwrap_err();
            assert!(error.contains(name) || error.contains(value) || error.contains("size"), "{name}={value}: {error}");
        }
    }

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("16MiB").unwrap(), 16 << 20);
        assert!(parse_size("K").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
        assert_eq!(format_size(1536), "1536 B");
        assert_eq!(format_size(1536 << 10), "1536 KB");
        assert_eq!(format_size(1 << 30), "1 GB");
        for size in default_sizes() {
            assert_eq!(parse_size(&format_size(size).replace(' ', "")).unwrap(), size);
        }
    }

    #[test]
    fn dtypes_parse_and_know_their_tolerance() {
        assert_eq!(Dtype::parse("F32").unwrap(), Dtype::F32);
        assert_eq!(Dtype::parse(" bf16 ").unwrap(), Dtype::Bf16);
        assert!(Dtype::F32.default_tolerance() < Dtype::Bf16.default_tolerance());
    }
}

mod stats_tests {
    use crate::stats::*;

    #[test]
    fn median_of_odd_even_and_no_samples() {
        assert_eq!(Summary::of(&[3.0, 1.0, 2.0]).median, 2.0);
        assert_eq!(Summary::of(&[4.0, 1.0, 3.0, 2.0]).median, 2.5);
        assert_eq!(Summary::of(&[7.0]).median, 7.0);
        assert!(Summary::of(&[]).median.is_nan());
    }

    #[test]
    fn summary_percentiles_bracket_the_median() {
        let samples: Vec<f64> = (1..=101).rev().map(f64::from).collect();
        let summary = Summary::of(&samples);
        assert_eq!(summary.median, 51.0);
        assert_eq!(summary.p10, 11.0);
        assert_eq!(summary.p90, 91.0);
        assert_eq!(summary.samples, 101);
        assert!(Summary::of(&[]).median.is_nan());
    }

    #[test]
    fn relative_error_is_normwise_and_never_passes_nan() {
        assert_eq!(relative_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        let error = relative_error(&[3.0, 4.0 + 5e-3], &[3.0, 4.0]);
        assert!((error - 1e-3).abs() < 1e-12, "{error}");
        assert_eq!(relative_error(&[f64::NAN, 1.0], &[1.0, 1.0]), f64::INFINITY);
        assert_eq!(relative_error(&[f64::INFINITY], &[1.0]), f64::INFINITY);
        assert_eq!(relative_error(&[1.0], &[1.0, 1.0]), f64::INFINITY);
        assert_eq!(relative_error(&[0.0, 0.5], &[0.0, 0.0]), 0.5);
    }

    #[test]
    fn random_numbers_are_reproducible_in_range_and_distinct_per_stream() {
        let draw = |seed| {
            let mut rng = Rng::new(seed);
            (0..1000).map(|_| rng.signed_unit()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let values = draw(seed(1, 0, 0));
        assert!(values.iter().all(|v| (-1.0..1.0).contains(v)));
        let mean: f32 = values.iter().sum::<f32>() / values.len() as f32;
        assert!(mean.abs() < 0.1, "mean {mean}");
        assert!(values.iter().any(|&v| v != 0.0));
        assert_ne!(seed(1, 0, 0), seed(1, 1, 0));
        assert_ne!(seed(1, 0, 0), seed(2, 0, 0));
        assert_ne!(seed(1, 0, 0), seed(1, 0, 1));
    }

    #[test]
    fn rotation_sets_span_twice_the_cache() {
        let l2 = 60 << 20;
        assert_eq!(rotation_sets(256 << 20, l2, 8), 1);
        assert_eq!(rotation_sets(60 << 20, l2, 8), 1);
        assert_eq!(rotation_sets(40 << 20, l2, 8), 3);
        assert_eq!(rotation_sets(16 << 20, l2, 8), 8);
        assert_eq!(rotation_sets(4 << 10, l2, 8), 8);
        assert_eq!(rotation_sets(4 << 10, l2, 0), 2);
    }
}

mod report_tests {
    use crate::options::Dtype;
    use crate::report::*;
    use crate::stats::Summary;

    fn row(case: &str, bytes: usize, weft: f64, baseline: f64, error: f64) -> Row {
        Row {
            case: case.into(),
            dtype: Dtype::F32,
            bytes,
            nranks: 1,
            weft: Summary { median: weft, p10: weft * 0.9, p90: weft * 1.1, samples: 50 },
            baseline: Summary { median: baseline, p10: baseline, p90: baseline, samples: 60 },
            bytes_moved: 2 * bytes as u64,
            input_sets: 1,
            weft_error: error,
            baseline_error: 0.0,
            tolerance: 1e-5,
            bus_factor: None,
        }
    }

    #[test]
    fn bus_bandwidth_follows_nccl_tests() {
        // 1 GiB per rank in 1 ms on 8 ranks: algbw 1073.7 GB/s, busbw × 2·7/8.
        let mut r = row("allreduce", 1 << 30, 1000.0, 2000.0, 0.0);
        assert_eq!(r.weft_busbw(), None);
        r.bus_factor = Some(2.0 * 7.0 / 8.0);
        let bus = r.weft_busbw().unwrap();
        assert!((bus - 1073.741824 * 1.75).abs() < 1e-6, "{bus}");
        assert!((r.baseline_busbw().unwrap() - bus / 2.0).abs() < 1e-6);
        let text = csv(&[r], 450.0, "NVIDIA H200", "2.28.9");
        let fields: Vec<&str> = text.lines().nth(1).unwrap().split(',').collect();
        let column = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
        assert!(fields[column("weft_busbw_gbps")].starts_with("1879.0"), "{text}");
        assert!(table(&[row("x", 4096, 1.0, 1.0, 0.0)], 4300.0).contains(" - "), "no bus bandwidth: a dash");
    }

    #[test]
    fn derived_columns() {
        let r = row("allreduce", 1 << 30, 1000.0, 1500.0, 0.0);
        assert_eq!(r.speedup(), 1.5);
        // 2 GiB in 1 ms.
        assert!((r.weft_gbps() - 2147.483648).abs() < 1e-6, "{}", r.weft_gbps());
        assert!((r.percent_of_limit(4300.0) - 100.0 * 2147.483648 / 4300.0).abs() < 1e-9);
        assert!(r.passed());
        assert!(!row("x", 1, 1.0, 1.0, f64::NAN).passed());
        assert!(!row("x", 1, 1.0, 1.0, 2e-5).passed());
    }

    #[test]
    fn csv_has_a_header_and_one_line_per_row_with_every_column() {
        let rows = [row("allreduce", 4096, 10.0, 20.0, 0.0), row("rms,norm", 1 << 20, 5.0, 4.0, f64::INFINITY)];
        let text = csv(&rows, 4300.0, "NVIDIA H200", "2.28.9");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], CSV_COLUMNS.join(","));
        assert!(lines[1].starts_with("allreduce,f32,4096,1,10,9,11,20,20,20,50,2,8192,"), "{}", lines[1]);
        assert!(lines[1].ends_with(",1,0,0,0.00001,true,NVIDIA H200,2.28.9"), "{}", lines[1]);
        assert!(lines[2].starts_with("\"rms,norm\",f32,1048576,"), "{}", lines[2]);
        assert!(lines[2].contains(",inf,0,0.00001,false,"), "{}", lines[2]);
        // Quoted commas aside, every line has one field per column.
        let unquoted = lines[2].replace("\"rms,norm\"", "rmsnorm");
        assert_eq!(unquoted.split(',').count(), CSV_COLUMNS.len());
    }

    #[test]
    fn csv_quoting_follows_rfc_4180() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
    }

    #[test]
    fn ranks_merge_to_the_slowest_time_and_the_worst_error() {
        let rank0 = vec![row("allreduce", 4096, 10.0, 30.0, 1e-7), row("allreduce", 8192, 12.0, 5.0, 0.0)];
        let mut rank1 = vec![row("allreduce", 4096, 11.0, 20.0, 1e-6), row("allreduce", 8192, 9.0, 6.0, 0.0)];
        rank1[1].baseline_error = f64::NAN;
        let merged = merge_ranks(vec![rank0, rank1]);
        assert_eq!(merged.len(), 2);
        assert_eq!((merged[0].weft.median, merged[0].baseline.median), (11.0, 30.0));
        assert_eq!(merged[0].weft_error, 1e-6);
        assert_eq!((merged[1].weft.median, merged[1].baseline.median), (12.0, 6.0));
        assert!(merged[1].baseline_error.is_nan() && !merged[1].passed());
        assert!(merge_ranks(Vec::new()).is_empty());
    }

    #[test]
    fn table_shows_every_row_and_flags_failures() {
        let rows = [row("allreduce", 4096, 10.0, 20.0, 0.0), row("rmsnorm", 64 << 20, 5.0, 4.0, f64::NAN)];
        let text = table(&rows, 4300.0);
        assert_eq!(text.lines().filter(|l| !l.is_empty()).count(), 3, "{text}");
        assert!(text.contains("4 KB") && text.contains("64 MB"), "{text}");
        assert!(text.contains("2.00x") && text.contains("0.80x"), "{text}");
        assert!(text.lines().nth(1).unwrap().contains(" ok "), "{text}");
        assert!(text.contains("FAILED"), "{text}");
    }
}

mod plot_tests {
    use crate::options::Dtype;
    use crate::plot::*;
    use crate::report::Row;
    use crate::stats::Summary;

    fn row(case: &str, dtype: Dtype, bytes: usize, speedup: f64) -> Row {
        let timing = |median| Summary { median, p10: median, p90: median, samples: 10 };
        Row {
            case: case.into(),
            dtype,
            bytes,
            nranks: 1,
            weft: timing(10.0),
            baseline: timing(10.0 * speedup),
            bytes_moved: bytes as u64,
            input_sets: 1,
            weft_error: 0.0,
            baseline_error: 0.0,
            tolerance: 1e-5,
            bus_factor: None,
        }
    }

    fn rows() -> Vec<Row> {
        let mut rows = Vec::new();
        for (case, dtype) in [("allreduce", Dtype::F32), ("allreduce", Dtype::Bf16), ("rmsnorm", Dtype::F32)] {
            for (step, size) in crate::options::default_sizes().into_iter().enumerate() {
                rows.push(row(case, dtype, size, 0.8 + 0.1 * step as f64));
            }
        }
        rows
    }

    /// Checks that `text` is well-formed XML as far as elements go: every tag closed in order, one root.
    fn assert_well_formed(text: &str) {
        let mut open: Vec<String> = Vec::new();
        let mut roots = 0;
        let mut rest = text;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("unterminated tag") + start;
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            if tag.starts_with('?') || tag.starts_with('!') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop().as_deref(), Some(name.trim()), "mismatched </{name}>");
            } else {
                if open.is_empty() {
                    roots += 1;
                }
                let name = tag.split_whitespace().next().unwrap_or("").trim_end_matches('/').to_string();
                if !tag.ends_with('/') {
                    open.push(name);
                }
            }
        }
        assert!(open.is_empty(), "unclosed elements: {open:?}");
        assert_eq!(roots, 1, "an XML document has one root element");
    }

    #[test]
    fn rows_group_into_one_series_per_case_and_dtype() {
        let mut rows = rows();
        rows[0].weft.median = f64::NAN;
        let series = series(&rows);
        let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["allreduce f32", "allreduce bf16", "rmsnorm f32"]);
        assert_eq!(series[0].points.len(), 8, "the NaN row is left out");
        assert_eq!(series[1].points[0], (12.0, 0.8));
        assert_eq!(series[1].points[8].0, 28.0);
    }

    #[test]
    fn the_svg_file_is_xml_with_every_series() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/fused.svg");
        write_speedup_svg(&path, &rows(), "NVIDIA H200, NCCL 2.28.9, 1 rank").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.trim_start().starts_with("<svg") || text.trim_start().starts_with("<?xml"), "{text:.200}");
        assert_well_formed(&text);
        for label in ["allreduce f32", "allreduce bf16", "rmsnorm f32", "break-even", "4 KB", "256 MB"] {
            assert!(text.contains(label), "{label} missing from the plot");
        }
        // The break-even line and one line per series.
        assert!(text.matches("<polyline").count() >= 4, "{text}");
        assert_eq!(text.matches("<circle").count(), 27);
    }

    #[test]
    fn nothing_to_plot_is_an_error_not_an_empty_file() {
        assert!(speedup_svg(&[], "x").is_err());
    }
}
