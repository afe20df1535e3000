//! The URLs each client is given, for each server it can talk to: our
//! server serves its root (paths relative to it), GCT's paths are the
//! file system's, and memory runs name /dev/zero and /dev/null on either.
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use lightpath_bench::dataset::{Dataset, Manifest};
use lightpath_bench::scenario::{DatasetKind, Mode, Scenario};
use lightpath_bench::tools::{invocation, Ctx};

mod common;
use common::programs;

fn dataset(kind: DatasetKind) -> Dataset {
    let tree = kind == DatasetKind::GitLike;
    Dataset {
        kind,
        id: "ds".into(),
        root: (kind != DatasetKind::Memory).then(|| PathBuf::from("/cache/ds")),
        entry: if tree { "tree" } else { "big.bin" }.into(),
        is_dir: tree,
        files: 1,
        bytes: 1 << 20,
        manifest: Manifest::default(),
    }
}

/// The last two arguments of the client: source and destination.
fn endpoints(tool: &str, mode: Mode, kind: DatasetKind) -> (String, String) {
    let text = format!("[path]\nkind = \"loopback\"\n[dataset]\nkind = \"large-file\"\n[[tool]]\n{tool}\n");
    let sc = Scenario::parse(&text, Path::new("urls.toml")).unwrap();
    let ds = dataset(kind);
    let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let ctx = Ctx { mode, ds: &ds, a, b, dest: Path::new("/dst"), logs: Path::new("/logs") };
    let argv = invocation(&sc.tools[0], &programs(), &ctx).unwrap().client;
    (argv[argv.len() - 2].clone(), argv[argv.len() - 1].clone())
}

const LP: &str = "tool = \"lightpath\"";
const LP_GCT: &str = "tool = \"lightpath\"\nserver = \"globus-gridftp-server\"";
const GUC: &str = "tool = \"globus-url-copy\"";
const GUC_LP: &str = "tool = \"globus-url-copy\"\nserver = \"lightpath\"";

fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

#[test]
fn each_client_names_the_data_as_its_server_serves_it() {
    use DatasetKind::{GitLike, LargeFile, Memory};
    use Mode::{Download, ThirdParty, Upload};
    let cases = [
        (LP, Download, GitLike, pair("ftp://10.0.0.1:2911/tree", "/dst/tree")),
        (LP_GCT, Download, GitLike, pair("ftp://10.0.0.1:2811/cache/ds/tree", "/dst/tree")),
        (LP_GCT, Upload, LargeFile, pair("/cache/ds/big.bin", "ftp://10.0.0.2:2812/dst/big.bin")),
        (
            LP_GCT,
            ThirdParty,
            LargeFile,
            pair("ftp://10.0.0.1:2811/cache/ds/big.bin", "ftp://10.0.0.2:2812/dst/big.bin"),
        ),
        (LP_GCT, Download, Memory, pair("ftp://10.0.0.1:2811/dev/zero", "/dev/null")),
        (GUC, Download, GitLike, pair("ftp://10.0.0.1:2811/cache/ds/tree/", "file:///dst/tree/")),
        (GUC, Upload, Memory, pair("file:///dev/zero", "ftp://10.0.0.2:2812/dev/null")),
        (GUC_LP, Download, GitLike, pair("ftp://10.0.0.1:2911/tree/", "file:///dst/tree/")),
        (GUC_LP, ThirdParty, LargeFile, pair("ftp://10.0.0.1:2911/big.bin", "ftp://10.0.0.2:2921/big.bin")),
        (GUC_LP, Download, Memory, pair("ftp://10.0.0.1:2911/dev/zero", "file:///dev/null")),
    ];
    for (tool, mode, kind, want) in cases {
        assert_eq!(endpoints(tool, mode, kind), want, "{tool} {mode:?} {kind:?}");
    }
}

/// GCT's servers never try to send usage statistics (an older server
/// resolves and reports to Globus unless told not to).
#[test]
fn gct_servers_send_no_usage_statistics() {
    let text = "[path]\nkind = \"loopback\"\n[dataset]\nkind = \"large-file\"\n[[tool]]\ntool = \"globus-url-copy\"\n";
    let sc = Scenario::parse(text, Path::new("gct.toml")).unwrap();
    let ds = dataset(DatasetKind::LargeFile);
    let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let ctx = Ctx { mode: Mode::ThirdParty, ds: &ds, a, b, dest: Path::new("/dst"), logs: Path::new("/logs") };
    let servers = invocation(&sc.tools[0], &programs(), &ctx).unwrap().servers;
    assert_eq!(servers.len(), 2);
    for s in servers {
        assert!(s.argv.iter().any(|a| a == "-disable-usage-stats"), "{:?}", s.argv);
        assert_eq!(s.env, [("GLOBUS_USAGE_OPTOUT".to_string(), "1".to_string())], "{}", s.role);
    }
}
