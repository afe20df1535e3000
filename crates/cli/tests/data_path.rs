//! The zero-copy choice is visible: with `-v`, the server says which way it
//! reads a download (`sendfile` from the page cache, or direct reads) and
//! the client which way it receives (splice or read+pwrite). The server's
//! choice also reaches the client in its perf markers (`Data Path:`),
//! which `cp -v` shows for downloads and uploads.

mod common;
use common::*;

#[test]
fn verbose_output_names_the_data_paths_of_both_ends() {
    own_peer_book();
    let (d, root, local) = root_and_local();
    write_random(&root.join("f"), 3_000_000, 7);
    let log = d.path().join("serve.log");
    let (srv, port) = logged_server(&root, &log, &[]);
    let (ok, client) = verbose_cp(&[&format!("ftp://127.0.0.1:{port}/f"), local.join("f").to_str().unwrap()]);
    assert!(ok, "{client}");
    assert_same_file(&root.join("f"), &local.join("f"));
    assert!(client.contains("receive data path"), "the client names its receive path: {client}");
    let server_path = |log: &str| log.lines().find(|l| l.contains("server data path")).map(str::to_string);
    let line = server_path(&client).unwrap_or_default();
    assert!(line.contains("path=sendfile"), "the server's markers name its send path: {client}");
    let (ok, client) = verbose_cp(&[local.join("f").to_str().unwrap(), &format!("ftp://127.0.0.1:{port}/back")]);
    assert!(ok, "{client}");
    assert_same_file(&root.join("f"), &root.join("back"));
    let line = server_path(&client).unwrap_or_default();
    assert!(["splice", "page cache", "direct I/O"].iter().any(|p| line.contains(p)), "upload path: {client}");
    drop(srv);
    let server = std::fs::read_to_string(&log).unwrap();
    assert!(server.contains("download sent with sendfile"), "the server names its send path: {server}");
}
