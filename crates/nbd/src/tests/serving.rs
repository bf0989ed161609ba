//! The server's setup: export lists it refuses, the errno a failure maps to, Unix and TCP
//! listeners.

use super::*;

#[tokio::test]
async fn server_rejects_bad_export_lists() {
    let dup = Server::new(vec![
        ("a".into(), mem(MIB) as Arc<dyn Export>),
        ("a".into(), mem(MIB) as Arc<dyn Export>),
    ]);
    assert!(matches!(dup, Err(ServerError::DuplicateName(_))));
    let odd = Arc::new(MemoryExport::new(MIB).with_block_sizes(3000, 4096));
    assert!(matches!(
        Server::new(vec![("a".into(), odd as Arc<dyn Export>)]),
        Err(ServerError::BadMinBlock { .. })
    ));
    assert_eq!(advertised_preferred(512, 196608), 262144);
    assert_eq!(advertised_preferred(4096, 512), 4096);
    assert_eq!(advertised_preferred(512, 0), 512);
    assert_eq!(advertised_preferred(512, u32::MAX), MAX_PAYLOAD);
}

#[test]
fn errno_mapping() {
    let raw = |e| errno_for(&io::Error::from_raw_os_error(e));
    assert_eq!(raw(libc::ENOSPC), ENOSPC);
    assert_eq!(raw(libc::EDQUOT), ENOSPC);
    assert_eq!(raw(libc::EFBIG), ENOSPC);
    assert_eq!(raw(libc::EROFS), EPERM);
    assert_eq!(raw(libc::EINVAL), EINVAL);
    assert_eq!(raw(libc::EOPNOTSUPP), ENOTSUP);
    assert_eq!(raw(libc::EBADF), EIO);
    assert_eq!(errno_for(&io::ErrorKind::PermissionDenied.into()), EPERM);
    assert_eq!(errno_for(&io::ErrorKind::Unsupported.into()), ENOTSUP);
    assert_eq!(errno_for(&io::Error::other("boom")), EIO);
}

#[tokio::test]
async fn unix_listener_replaces_stale_socket_and_refuses_a_live_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    // A stale socket file: bound once, listener dropped.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let server = server_with(vec![("a", mem(MIB))]);
    let l = Listener::bind_unix(&path).unwrap();
    assert_eq!(
        l.uri("a"),
        format!("nbd+unix:///a?socket={}", path.display())
    );
    let live = Listener::bind_unix(&path);
    assert!(matches!(live, Err(ServerError::Bind { .. })));
    // A regular file is never removed.
    let file = dir.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    assert!(Listener::bind_unix(&file).is_err());
    assert!(file.exists());

    let s = server.clone();
    let task = tokio::spawn(async move { s.serve(l).await });
    let stream = tokio::net::UnixStream::connect(&path).await.unwrap();
    let mut c = Client {
        s: {
            // Bridge the Unix stream to the duplex-based client helpers.
            let (a, b) = duplex(MIB as usize);
            tokio::spawn(async move {
                let (mut br, mut bw) = tokio::io::split(b);
                let (mut ur, mut uw) = stream.into_split();
                let _ = tokio::join!(
                    tokio::io::copy(&mut br, &mut uw),
                    tokio::io::copy(&mut ur, &mut bw)
                );
            });
            a
        },
        handle: None,
    };
    c.go("a", false).await;
    c.write(1, 0, &[1u8; 512]).await;
    assert_eq!(c.simple().await, (0, 1));
    bounded(server.shutdown()).await.unwrap();
    bounded(task).await.unwrap();
    assert!(!path.exists(), "socket file removed at shutdown");
}

#[tokio::test]
async fn tcp_listener_serves() {
    let server = server_with(vec![("a", mem(MIB))]);
    let l = Listener::bind_tcp("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = l.tcp_addr().unwrap();
    assert_eq!(l.uri("a"), format!("nbd://{addr}/a"));
    // The port is taken now.
    assert!(Listener::bind_tcp(addr).await.is_err());
    let s = server.clone();
    let task = tokio::spawn(async move { s.serve(l).await });
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut g = [0u8; 18];
    bounded(stream.read_exact(&mut g)).await.unwrap();
    assert_eq!(&g[0..8], &NBDMAGIC.to_be_bytes());
    stream.write_u32(FLAG_C_FIXED_NEWSTYLE).await.unwrap();
    let mut opt = Vec::new();
    opt.extend_from_slice(&IHAVEOPT.to_be_bytes());
    opt.extend_from_slice(&OPT_ABORT.to_be_bytes());
    opt.extend_from_slice(&0u32.to_be_bytes());
    stream.write_all(&opt).await.unwrap();
    let mut rep = [0u8; 20];
    bounded(stream.read_exact(&mut rep)).await.unwrap();
    assert_eq!(&rep[12..16], &REP_ACK.to_be_bytes());
    bounded(server.shutdown()).await.unwrap();
    bounded(task).await.unwrap();
}
