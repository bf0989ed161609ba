//! One process-wide thread that destages partial stripes older than their cache's
//! `max_age`, for every write-back parity group (runtime-agnostic: it drives the destage
//! futures with `block_on`; member futures complete on their own threads).

use super::*;

/// How often the thread looks for aged stripes.
const TICK: Duration = Duration::from_millis(100);

static GROUPS: OnceLock<Mutex<Vec<Weak<ParityCore>>>> = OnceLock::new();

pub(super) fn register(core: Weak<ParityCore>) {
    let mut started = false;
    let groups = GROUPS.get_or_init(|| {
        started = true;
        Mutex::new(Vec::new())
    });
    groups.lock().push(core);
    if started {
        let spawned = std::thread::Builder::new()
            .name("nbraid-destage".into())
            .spawn(run);
        if let Err(e) = spawned {
            tracing::error!("cannot start the stripe cache flusher thread: {e}; partial stripes wait for flush or eviction");
        }
    }
}

fn run() {
    let groups = GROUPS.get().expect("initialized before the thread starts");
    loop {
        std::thread::sleep(TICK);
        let live: Vec<Arc<ParityCore>> = {
            let mut g = groups.lock();
            g.retain(|w| w.strong_count() > 0);
            g.iter().filter_map(Weak::upgrade).collect()
        };
        for core in live {
            let _busy = core.flushing.lock();
            if !core.closed.load(Ordering::Acquire) {
                futures::executor::block_on(core.destager().destage_aged());
            }
        }
    }
}
