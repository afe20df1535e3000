//! Unit tests of the receive path's bookkeeping.

use super::*;

fn buf_piece(at: u64, len: usize, byte: u8) -> Piece {
    Piece { data: Data::Buf(BlockBuf::Heap(vec![byte; len])), len, at, wire: at }
}

/// Records each call: (offset, piece lengths).
#[derive(Default)]
struct Calls(Mutex<Vec<(u64, Vec<usize>)>>);

impl Sink for Calls {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.0.lock().unwrap().push((offset, vec![buf.len()]));
        Ok(())
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> std::io::Result<()> {
        self.0.lock().unwrap().push((offset, bufs.iter().map(|b| b.len()).collect()));
        Ok(())
    }
}

#[test]
fn pieces_back_to_back_go_down_as_one_write() {
    let ps = [buf_piece(0, 4, 1), buf_piece(4, 4, 2), buf_piece(8, 2, 3), buf_piece(12, 4, 4)];
    assert_eq!(run_len(&ps), 3);
    assert_eq!(run_len(&ps[3..]), 1);
    let sink = Calls::default();
    write_run(&sink, &ps[..3]).unwrap();
    write_run(&sink, &ps[3..]).unwrap();
    assert_eq!(*sink.0.lock().unwrap(), vec![(0, vec![4, 4, 2]), (12, vec![4])]);
}

#[test]
fn a_spliced_piece_ends_a_run() {
    let pipe = Pipe::new().expect("pipe");
    let ps = [buf_piece(0, 4, 1), Piece { data: Data::Pipe(pipe), len: 4, at: 4, wire: 4 }];
    assert_eq!(run_len(&ps), 1);
}

#[test]
fn loopback_transfers_splice_by_default_and_others_copy() {
    let lo = TcpListener::bind("127.0.0.1:0").unwrap();
    let any = TcpListener::bind("0.0.0.0:0").unwrap();
    let c = TcpStream::connect(lo.local_addr().unwrap()).unwrap();
    assert!(splice_by_default(&[c], None));
    assert!(splice_by_default(&[], Some(&lo)));
    assert!(!splice_by_default(&[], Some(&any)));
    assert!(!splice_by_default(&[], None));
}
