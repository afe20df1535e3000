//! The scratch file system: empty and new for every run, gone afterwards.
use std::path::Path;

use lightpath_bench::scratchfs::ScratchFs;

fn mounted_fs(dir: &Path) -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let d = dir.to_string_lossy();
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&&*d)).then(|| f[2].to_string())
    })
}

fn loop_devices_on(image: &Path) -> String {
    let out = std::process::Command::new("losetup").arg("-j").arg(image).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_reset_gives_a_new_empty_ext4_and_drop_cleans_up() {
    assert!(rustix::process::geteuid().is_root(), "this test needs root (loop devices, mount)");
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().join("scratch");
    let image = cache.path().join("scratch.img");
    let scratch = ScratchFs::new(&dir, 64 << 20, 5000);
    assert!(scratch.describe().starts_with("fresh ext4"), "{}", scratch.describe());
    let root = scratch.reset().unwrap().to_path_buf();
    assert_eq!(mounted_fs(&root).as_deref(), Some("ext4"));
    std::fs::write(root.join("left-over"), b"x").unwrap();
    let stat = rustix::fs::statvfs(&root).unwrap();
    assert!(stat.f_files >= 10_000, "room for the data set's files: {} inodes", stat.f_files);
    let root = scratch.reset().unwrap().to_path_buf();
    assert!(!root.join("left-over").exists(), "a reset kept the last run's files");
    assert_eq!(
        std::fs::read_dir(&root).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name() != "lost+found").count(),
        0
    );
    let attached = loop_devices_on(&image);
    let dev = attached.split(':').next().unwrap().trim_start_matches("/dev/").to_string();
    assert!(dev.starts_with("loop"), "no loop device on the image: {attached:?}");
    let backing = Path::new("/sys/block").join(&dev).join("loop/backing_file");
    assert!(std::fs::read_to_string(&backing).unwrap().contains("scratch.img"));
    drop(scratch);
    assert_eq!(mounted_fs(&dir), None, "still mounted");
    // A bench killed mid-run leaves a mount and a loop device: the next one
    // takes them down.
    let killed = ScratchFs::new(&dir, 64 << 20, 5000);
    killed.reset().unwrap();
    let left = loop_devices_on(&image);
    std::mem::forget(killed);
    let next = ScratchFs::new(&dir, 64 << 20, 5000);
    let old = left.split(':').next().unwrap().trim_start_matches("/dev/").to_string();
    let old_backing = std::fs::read_to_string(Path::new("/sys/block").join(&old).join("loop/backing_file"));
    assert!(old_backing.is_err() || !old_backing.unwrap().contains("scratch.img (deleted)"), "{old} leaked");
    assert_eq!(mounted_fs(&dir), None, "the old mount was taken down");
    drop(next);
    assert_eq!(loop_devices_on(&image), "", "loop device left attached");
    let single = ScratchFs::new(&cache.path().join("one"), 1 << 20, 1);
    assert!(single.describe().contains("one file"), "{}", single.describe());
    let plain = single.reset().unwrap();
    assert_eq!(mounted_fs(plain), None, "a single file goes to the machine's own file system");
    assert!(!image.exists(), "image left behind");
    let still = std::fs::read_to_string(&backing).unwrap_or_default();
    assert!(!still.contains(&*image.to_string_lossy()), "{dev} still attached to the image");
    // A tree's bench killed, then a single file's: its mount, loop device
    // and image went on for good.
    let killed = ScratchFs::new(&dir, 64 << 20, 5000);
    killed.reset().unwrap();
    std::mem::forget(killed);
    let single = ScratchFs::new(&dir, 1 << 20, 1);
    assert_eq!(mounted_fs(&dir), None, "the killed bench's mount was taken down");
    assert_eq!(loop_devices_on(&image), "", "its loop device was detached");
    assert!(!image.exists(), "its image was removed");
    drop(single);
}
