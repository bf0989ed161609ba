//! A new volume (no member carries its superblock) with a remote member whose server answers
//! with an export too small: the start's refusal says the member is unusable, with both
//! sizes, as `nbraidd --check` and `nbraid check` do — it said "unreachable: …" of a server
//! that answered. The export is a file served by `nbdkit file`.

mod common;

use common::*;

#[test]
fn a_new_volume_s_too_small_export_is_said_unusable_not_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_kit, uri) = served_file(d, "small", 8 * MIB);
    let file = d.join("arrays.toml");
    std::fs::write(
        &file,
        format!(
            "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\
             [[member]]\nid = \"l0\"\npath = \"l0.img\"\nsize = \"32MiB\"\n\
             [[member]]\nid = \"r\"\npath = \"{uri}\"\nsize = \"32MiB\"\n\
             [[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [\"l0\", \"r\"]\n",
        ),
    )
    .unwrap();
    let said = start_refused(&file);
    let refusal = said
        .lines()
        .find(|l| l.contains("no member carries the volume's superblock"))
        .unwrap_or_else(|| panic!("the refusal: {said}"));
    assert!(refusal.contains("member r (nbd+unix://"), "{refusal}");
    assert!(refusal.contains("): unusable: "), "{refusal}");
    assert!(
        refusal.contains(
            "the export is too small: 8 MiB (8388608 bytes), but the member needs 32 MiB"
        ),
        "{refusal}"
    );
    assert!(!refusal.contains("unreachable"), "{refusal}");
}
