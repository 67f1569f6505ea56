//! Time of one Runtime -> Shoot conversion (create and patch form), for the AWS sample with
//! three zones and the Azure sample, with the example configuration of `deploy/config`.
//! `make bench-convert` runs it; expect microseconds per conversion.
#![allow(clippy::unwrap_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use kim_shared::api::Runtime;
use kim_shared::config::{ConfigPaths, KimConfig};
use kim_shared::convert::to_shoot;
use std::hint::black_box;
use std::path::Path;

fn load(example: &str) -> Runtime {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../config/samples")
        .join(example);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rt: Runtime = serde_yaml_ng::from_str(&text).unwrap();
    rt.metadata.generation = Some(1);
    rt
}

fn bench(c: &mut Criterion) {
    let config =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/converter_config.json");
    let cfg = KimConfig::load(&ConfigPaths::new(&config)).unwrap();
    let mut group = c.benchmark_group("convert");
    for example in ["runtime-aws.yaml", "runtime-azure.yaml"] {
        let rt = load(example);
        let live = to_shoot(&rt, &cfg, None).unwrap().shoot;
        group.bench_function(format!("create/{example}"), |b| {
            b.iter(|| to_shoot(black_box(&rt), &cfg, None).unwrap())
        });
        group.bench_function(format!("patch/{example}"), |b| {
            b.iter(|| to_shoot(black_box(&rt), &cfg, Some(black_box(&live))).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
