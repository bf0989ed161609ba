//! Where the control socket may be bound. nbraidd replaces a stale socket at that path, so
//! the path must never be a file that holds anything: the config file itself (a config
//! named `x.ctl` is its own default socket path), a member, an NBD listener's socket, or
//! any other file or directory that is not a socket.

use crate::error::{ErrorKind, Problem};
use crate::listen::Listener;
use crate::model::Member;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The control socket a config names (`[daemon] control`, else the config's path with
/// `.ctl`), read without checking the rest of the file: the admin commands reach a running
/// daemon even while its config no longer checks (a member file cut short, a typo being
/// edited). A file that does not read as TOML gives the default path.
pub fn control_socket_of(file: &Path) -> PathBuf {
    let named = crate::read_text(file)
        .ok()
        .and_then(|text| text.parse::<toml::Table>().ok())
        .and_then(|t| {
            let daemon = t.get("daemon")?.as_table()?;
            Some(daemon.get("control")?.as_str()?.to_string())
        })
        .filter(|c| !c.is_empty());
    let base = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match named {
        Some(c) => base.join(c),
        None => file.with_extension("ctl"),
    }
}

/// What at the control socket's path (`control`) rules it out, if anything. `config`: the
/// config file; `is_socket`: what is at a path now (`None`: nothing).
pub(crate) fn conflict(
    control: &Path,
    config: &Path,
    members: &[Member],
    listen: &[Listener],
    is_socket: impl Fn(&Path) -> Option<bool>,
) -> Option<String> {
    let shown = control.display();
    if let Some(why) = crate::listen::unix_path_problem(control) {
        return Some(format!("daemon: control: {why}"));
    }
    if control == config {
        return Some(format!(
            "daemon: the control socket's path {shown} is the config file itself (the default is the config's path with .ctl); rename the config or set [daemon] control"
        ));
    }
    if let Some(m) = members.iter().find(|m| m.path == control) {
        return Some(format!(
            "daemon: the control socket's path {shown} is member {}'s; give the control socket a path of its own",
            m.id
        ));
    }
    if listen
        .iter()
        .any(|l| matches!(l, Listener::Unix(p) if p == control))
    {
        return Some(format!(
            "daemon: the control socket's path {shown} is also an NBD listener's; give each socket a path of its own"
        ));
    }
    match is_socket(control) {
        Some(false) => Some(format!(
            "daemon: the control socket's path {shown} holds a file that is not a socket; nbraidd replaces only a stale socket there — give a free path"
        )),
        _ => None,
    }
}

/// [`conflict`] as the config's problem, at `span` (the `control` key's, or none for the
/// default path), asking the file system what is at the path.
pub(crate) fn check(
    control: &Path,
    config: &Path,
    members: &[Member],
    listen: &[Listener],
    span: Range<usize>,
) -> Result<(), Problem> {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = |p: &Path| {
        std::fs::symlink_metadata(p)
            .ok()
            .map(|m| m.file_type().is_socket())
    };
    match conflict(control, config, members, listen, is_socket) {
        Some(why) => Err(Problem::new(span, ErrorKind::Listen, why)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, path: &str) -> Member {
        let text = format!(
            "[[member]]\nid = \"{id}\"\npath = \"{path}\"\nsize = \"8MiB\"\n\
             [[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"{id}\"]\n"
        );
        let c = crate::parse(&text, Path::new("/cfg/a.toml")).expect("config");
        c.members[0].clone()
    }

    #[test]
    fn the_control_socket_never_takes_a_file_that_holds_something() {
        let config = Path::new("/cfg/a.ctl");
        let members = [member("d0", "/cfg/d0.img")];
        let listen = [Listener::Unix(PathBuf::from("/cfg/nbd.sock"))];
        let nothing = |_: &Path| None;
        let why = |p: &str, at: &dyn Fn(&Path) -> Option<bool>| {
            conflict(Path::new(p), config, &members, &listen, at)
        };
        assert!(why("/cfg/a.ctl", &nothing)
            .unwrap()
            .contains("the config file itself"));
        assert!(why("/cfg/d0.img", &nothing).unwrap().contains("member d0"));
        assert!(why("/cfg/nbd.sock", &nothing)
            .unwrap()
            .contains("NBD listener"));
        assert!(why("/cfg/x", &|_| Some(false))
            .unwrap()
            .contains("not a socket"));
        assert_eq!(
            why("/cfg/x", &|_| Some(true)),
            None,
            "a stale socket is replaced"
        );
        assert_eq!(why("/cfg/x", &nothing), None);
    }

    #[test]
    fn a_control_path_too_long_for_a_socket_address_does_not_check() {
        let long = "c".repeat(crate::listen::UNIX_PATH_BYTES_MAX);
        let text = format!(
            "[daemon]\ncontrol = \"{long}\"\n[[member]]\nid = \"d0\"\npath = \"d0.img\"\n\
             size = \"8MiB\"\n[[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"d0\"]\n"
        );
        let e = crate::parse(&text, Path::new("/cfg/a.toml")).expect_err("refused");
        let e = e.to_string();
        assert!(
            e.contains("daemon: control:") && e.contains(&format!("/cfg/{long}")),
            "{e}"
        );
        assert!(e.contains("at most 107"), "{e}");
        // The default path (the config's with .ctl) is held to the same bound.
        let dir = format!("/{}", "d".repeat(101)); // /DIR/a.ctl: 108 bytes
        let text = text.replace(&format!("control = \"{long}\"\n"), "");
        let e = crate::parse(&text, &Path::new(&dir).join("a.toml")).expect_err("refused");
        assert!(e.to_string().contains(&format!("{dir}/a.ctl")), "{e}");
    }

    #[test]
    fn the_control_socket_is_found_in_a_config_that_does_not_check() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.toml");
        std::fs::write(
            &file,
            "[daemon]\ncontrol = \"run/x.ctl\"\n[[member]]\nid = 7\n",
        )
        .unwrap();
        assert_eq!(control_socket_of(&file), dir.path().join("run/x.ctl"));
        std::fs::write(&file, "[daemon\ncontrol = ").unwrap();
        assert_eq!(control_socket_of(&file), dir.path().join("a.ctl"));
    }

    #[test]
    fn a_config_whose_control_is_a_member_does_not_check() {
        let text = "[daemon]\ncontrol = \"d0.img\"\n[[member]]\nid = \"d0\"\npath = \"d0.img\"\n\
                    size = \"8MiB\"\n[[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"d0\"]\n";
        let e = crate::parse(text, Path::new("/cfg/a.toml")).expect_err("refused");
        assert!(e.to_string().contains("member d0"), "{e}");
    }
}
