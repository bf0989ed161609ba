//! Counters across a volume's incarnations: an online reshape opens the volume again as a
//! new engine volume with fresh counters, and a Prometheus counter must never go back while
//! the daemon runs.

use super::*;
use crate::control::{ControlVolume, StartReport};
use crate::served::{members_by_role, ServedArray};
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta};
use nbraid_core::{Buf, Member, MemoryMember};

const MIB: u64 = 1 << 20;

/// Volume `r1`: a RAID 1 of two memory members, `d0` and `d1`.
async fn mirror() -> Controls {
    let mut metas = Vec::new();
    for i in 0..2 {
        let m = Arc::new(MemoryMember::new(format!("m{i}"), 9 * MIB)) as Arc<dyn Member>;
        metas.push(MemberMeta::load(m).await);
    }
    let leaves = (0..2)
        .map(|i| nbraid_layout::Node::member(i, MIB, 8 * MIB))
        .collect();
    let tree = nbraid_layout::Node::mirror(leaves).unwrap();
    let opts = ArrayOptions::default();
    let (array, _) = Array::create("r1", tree, metas, opts.clone(), true, &|_, _| {})
        .await
        .unwrap();
    let served = Arc::new(ServedArray::new(Arc::new(array), opts));
    let ids = vec!["d0".to_string(), "d1".to_string()];
    let v = ControlVolume::new(
        "r1".into(),
        "raid1".into(),
        served,
        ids,
        vec!["active"; 2],
        StartReport::default(),
    );
    Controls {
        volumes: vec![v],
        config: None,
    }
}

/// Every counter sample of a scrape (`…_total`), as (name with labels, value).
fn counters(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(name, _)| {
            name.split('{')
                .next()
                .is_some_and(|n| n.ends_with("_total"))
        })
        .map(|(name, value)| (name.to_string(), value.parse().unwrap()))
        .collect()
}

/// Some I/O on the volume served now: writes, reads, a flush.
async fn some_io(v: &ControlVolume) {
    let array = v.array();
    let vol = array.volume();
    vol.write(0, Buf::zeroed(64 << 10), false).await.unwrap();
    vol.read(0, 64 << 10).await.unwrap();
    vol.flush().await.unwrap();
}

/// Found by a service hunt: `nbraid_volume_*_total` went back to 0 once an online reshape
/// opened the volume again (a new engine volume, fresh counters): a rate() over it saw a
/// reset, an increase() lost what the volume had done.
#[tokio::test]
async fn counters_never_go_back_when_the_volume_is_opened_again() {
    let controls = mirror().await;
    let v = &controls.volumes[0];
    some_io(v).await;
    let scrape = || counters(&render(&controls, &Latencies::default(), 0));
    let before = scrape();
    let requests = "nbraid_volume_requests_total{volume=\"r1\",op=\"write\"}";
    assert!(
        before.iter().any(|(n, x)| n == requests && *x > 0.0),
        "{before:?}"
    );
    {
        let mut quiet = v.served.quiet().await;
        let members = members_by_role(&v.served.get());
        v.served.reopen(&mut quiet, &members, None).await.unwrap();
    }
    let after = scrape();
    for (name, was) in &before {
        let now = after.iter().find(|(n, _)| n == name).map(|(_, x)| *x);
        assert!(
            now.is_some_and(|now| now >= *was),
            "{name}: {was} then {now:?}"
        );
    }
    // And they go on counting from there.
    some_io(v).await;
    let more = scrape();
    let value = |s: &[(String, f64)]| s.iter().find(|(n, _)| n == requests).unwrap().1;
    assert!(value(&more) > value(&before), "{more:?}");
}
