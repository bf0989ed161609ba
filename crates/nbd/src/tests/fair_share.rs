//! The server's memory shared fairly: a few clients that never read their replies cannot
//! hold the budget from the others (see `server_memory`).

use super::*;

const ONE_MIB: u32 = 1 << 20;

/// Service hunt: four clients sending 256 reads of 1 MiB each over a raw socket and never
/// reading the replies held the whole server budget, each within its own share; a normal
/// client's 1 MiB read and write then waited 57 s, for the stall timeout to cut them off.
/// Now each of them stops taking while it holds more than half of what it leaves free.
#[tokio::test(start_paused = true)]
async fn clients_that_never_read_their_replies_leave_a_megabyte_request_served() {
    const HOGS: u64 = 6;
    let limits = Limits {
        max_bytes_in_flight: 32 * MIB as usize,
        server_bytes_in_flight: 128 * MIB as usize,
        // The hogs are never cut off during the test.
        stall_timeout: Duration::from_secs(3600),
        ..Limits::default()
    };
    let server =
        Server::with_limits(vec![("a".into(), mem(64 * MIB) as Arc<dyn Export>)], limits).unwrap();
    let mut hogs = Vec::new();
    for h in 0..HOGS {
        let mut c = Client::connect(&server);
        c.go("a", false).await;
        let (rd, mut wr) = tokio::io::split(c.s);
        // The pipe takes the headers (28 bytes each) at once; the replies fill it and stay.
        for i in 0..256u64 {
            let offset = ((h * 256 + i) % 64) * MIB;
            let req = RequestHeader {
                flags: 0,
                typ: CMD_READ,
                cookie: i,
                offset,
                length: ONE_MIB,
            };
            wr.write_all(&req.encode()).await.unwrap();
        }
        hogs.push((rd, wr, c.handle));
        tokio::task::yield_now().await;
    }
    // Every hog has taken what it may and waits for more.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut n = Client::connect(&server);
    n.go("a", false).await;
    let served = tokio::time::timeout(Duration::from_secs(10), async {
        let data = n.read_simple(1, 0, ONE_MIB).await;
        n.write(2, MIB, &data).await;
        n.simple().await
    })
    .await
    .expect("a 1 MiB read and write waited behind clients that never read their replies");
    assert_eq!(served, (0, 2));
    // Nobody was cut off.
    assert_eq!(server.connections(), HOGS as usize + 1);
    drop(hogs);
}
