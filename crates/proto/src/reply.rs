//! FTP replies (RFC 959 section 4.2): building them on the server, parsing
//! them on the client. Multi-line replies are written the way the Globus
//! clients parse them: `NNN-first`, continuation lines, `NNN End.`.

/// A complete reply: code, first line, continuation lines, last line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Three-digit reply code.
    pub code: u16,
    /// All text lines without the code prefix. One entry: a single-line
    /// reply. Several: the first is after `NNN-`, the last after `NNN `.
    pub lines: Vec<String>,
}

impl Reply {
    /// A single-line reply.
    pub fn new(code: u16, text: impl Into<String>) -> Self {
        Reply { code, lines: vec![clean(&text.into())] }
    }

    /// A multi-line reply with `body` lines between `first` and `NNN End.`.
    /// Body lines are sent with one leading space (as GCT does).
    pub fn multi(code: u16, first: &str, body: impl IntoIterator<Item = String>) -> Self {
        let mut lines = vec![clean(first)];
        lines.extend(body.into_iter().map(|l| clean(&l)));
        lines.push("End.".to_string());
        Reply { code, lines }
    }

    /// `226` for a completed transfer. A virtual file (lightpath `LPVF`)
    /// carries its tree's file count, `Transfer Complete: N files.`, which
    /// [`Reply::files_completed`] reads back.
    /// `files` is `None` for a single file, the count (0 for an empty
    /// tree) for a tree.
    pub fn transfer_complete(files: Option<u64>) -> Self {
        match files {
            None => Reply::new(226, "Transfer Complete."),
            Some(n) => Reply::new(226, format!("Transfer Complete: {n} files.")),
        }
    }

    /// The file count of a [`Reply::transfer_complete`] for a tree.
    pub fn files_completed(&self) -> Option<u64> {
        let n = self.text().strip_prefix("Transfer Complete: ")?.strip_suffix(" files.")?;
        n.parse().ok()
    }

    /// `226` for a tree sent as a virtual file whose walk left out
    /// `skipped` special files (FIFOs, devices, sockets). None skipped: the
    /// single line of [`Reply::transfer_complete`]. Otherwise that line
    /// stays first (older clients read the file count from it) and a
    /// continuation line says how many were skipped, which
    /// [`Reply::special_files_skipped`] reads back:
    ///
    /// ```text
    /// 226-Transfer Complete: 5 files.
    ///  2 special file(s) skipped (FIFOs, devices, sockets are not copied).
    /// 226 End.
    /// ```
    pub fn tree_complete(files: Option<u64>, skipped: u64) -> Self {
        let done = Reply::transfer_complete(files);
        match skipped {
            0 => done,
            n => Reply::multi(226, done.text(), [format!("{n} {SKIPPED}")]),
        }
    }

    /// This (final, `226`) reply of a tree saying also how many bytes of
    /// its files' data went, `N bytes of file data.` on a continuation
    /// line (the wire carried the manifest too; a third-party client's
    /// summary counts these). `None`: the reply as it is.
    pub fn with_data_bytes(self, n: Option<u64>) -> Reply {
        match n {
            Some(n) => self.with_lines(vec![format!("{n} {DATA_BYTES}")]),
            None => self,
        }
    }

    /// The first continuation line of this multi-line reply that starts
    /// with `prefix`, as `parse` reads it, taken out (the rest is the reply
    /// a user is shown); one that does not parse stays. A reply left with
    /// its text alone is single-line again.
    pub(crate) fn take_line<T>(&mut self, prefix: &str, parse: impl FnOnce(&str) -> Option<T>) -> Option<T> {
        if self.lines.len() < 3 {
            return None;
        }
        let end = self.lines.len() - 1;
        let i = (1..end).find(|&i| self.lines[i].trim_start().starts_with(prefix))?;
        let got = parse(&self.lines[i])?;
        self.lines.remove(i);
        if self.lines.len() == 2 {
            self.lines.pop(); // back to the single line it was
        }
        Some(got)
    }

    /// This reply with `lines` added before its last (a single-line reply
    /// becomes a multi-line one, its text first).
    pub(crate) fn with_lines(mut self, lines: Vec<String>) -> Reply {
        if self.lines.len() <= 1 {
            return Reply::multi(self.code, self.text(), lines);
        }
        let end = self.lines.len() - 1;
        self.lines.splice(end..end, lines);
        self
    }

    /// What a [`Reply::with_data_bytes`] says (`None`: not said, or not a `226`).
    pub fn data_bytes(&self) -> Option<u64> {
        if self.code != 226 {
            return None;
        }
        let n = |l: &String| l.trim().strip_suffix(DATA_BYTES)?.trim_end().parse::<u64>().ok();
        self.lines.iter().skip(1).find_map(n)
    }

    /// The special files a [`Reply::tree_complete`] says were skipped (0:
    /// none, or a server that does not say).
    pub fn special_files_skipped(&self) -> u64 {
        if self.code != 226 {
            return 0;
        }
        let count = |l: &String| l.trim().strip_suffix(SKIPPED)?.trim_end().parse::<u64>().ok();
        self.lines.iter().skip(1).find_map(count).unwrap_or(0)
    }

    /// This (final, `226`) reply of a listing with a continuation line
    /// saying that `n` names were left out of it: a name holding a line
    /// break would end its listing line early (and make the rest a forged
    /// entry), so it is not listed, and a client copying the directory
    /// file by file must not think it has it all ([`Reply::names_left_out`]).
    pub fn with_names_left_out(self, n: u64) -> Reply {
        match n {
            0 => self,
            n => self.with_lines(vec![format!("{n} {LEFT_OUT}")]),
        }
    }

    /// What a [`Reply::with_names_left_out`] says (0: nothing, or not a `226`).
    pub fn names_left_out(&self) -> u64 {
        if self.code != 226 {
            return 0;
        }
        let count = |l: &String| l.trim().strip_suffix(LEFT_OUT)?.trim_end().parse::<u64>().ok();
        self.lines.iter().skip(1).find_map(count).unwrap_or(0)
    }

    /// The first line of text.
    pub fn text(&self) -> &str {
        self.lines.first().map(String::as_str).unwrap_or("")
    }

    /// Every line joined with newlines (for error messages).
    pub fn full_text(&self) -> String {
        self.lines.join("\n")
    }

    /// Preliminary (1yz).
    pub fn is_preliminary(&self) -> bool {
        self.code / 100 == 1
    }

    /// Completion (2yz).
    pub fn is_ok(&self) -> bool {
        self.code / 100 == 2
    }

    /// Intermediate (3yz).
    pub fn is_intermediate(&self) -> bool {
        self.code / 100 == 3
    }

    /// Error (4yz or 5yz).
    pub fn is_error(&self) -> bool {
        self.code >= 400
    }

    /// Wire form with CRLF line ends.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::new();
        let n = self.lines.len();
        if n <= 1 {
            out.push_str(&format!("{} {}\r\n", self.code, self.text()));
            return out.into_bytes();
        }
        out.push_str(&format!("{}-{}\r\n", self.code, self.lines[0]));
        for l in &self.lines[1..n - 1] {
            out.push(' ');
            out.push_str(l.strip_prefix(' ').unwrap_or(l));
            out.push_str("\r\n");
        }
        out.push_str(&format!("{} {}\r\n", self.code, self.lines[n - 1]));
        out.into_bytes()
    }
}

/// `r` as a client reads it back from the wire (tests).
#[cfg(test)]
pub(crate) fn through_the_wire(r: &Reply) -> Reply {
    let wire = String::from_utf8(r.encode()).unwrap();
    let mut p = ReplyParser::new();
    wire.split("\r\n").filter(|l| !l.is_empty()).filter_map(|l| p.handle_line(l).unwrap()).last().unwrap()
}

/// The continuation line of [`Reply::with_data_bytes`] after its count.
const DATA_BYTES: &str = "bytes of file data.";
const LEFT_OUT: &str = "name(s) with a line break left out of the listing.";

/// The continuation line of [`Reply::tree_complete`] after its count.
const SKIPPED: &str = "special file(s) skipped (FIFOs, devices, sockets are not copied).";

/// Remove CR, LF and other control bytes so one line cannot become two.
fn clean(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// Error in a reply stream from a server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// A multi-line reply with more lines than [`MAX_REPLY_LINES`].
    #[error("multi-line reply longer than {0} lines; refused")]
    TooLong(usize),
    /// A multi-line reply holding more than [`MAX_REPLY_BYTES`].
    #[error("multi-line reply larger than {} KiB; refused", .0 >> 10)]
    TooLarge(usize),
    /// The first line did not start with a reply code: no FTP server there.
    #[error("not an FTP server: it began with {0:?}")]
    NotFtp(String),
}

/// Most lines accepted in one multi-line reply. The longest a GridFTP
/// server sends are FEAT and HELP (a few dozen lines) and the 112 perf
/// marker (five per stripe).
pub const MAX_REPLY_LINES: usize = 10_000;

/// Most memory one multi-line reply may take: its text plus
/// [`LINE_COST`] per line. Each line may be as long as
/// [`crate::line::MAX_LINE`], so without this a hostile server's FEAT of
/// 99 000 continuation lines of 8 KB took 824 MB of the client's memory.
pub const MAX_REPLY_BYTES: usize = 1 << 20;

/// What a line costs beside its text (its `String` in [`Reply::lines`]).
const LINE_COST: usize = std::mem::size_of::<String>();

/// Assembles replies from control-channel lines (client side). A
/// multi-line reply is bounded by [`MAX_REPLY_LINES`] and
/// [`MAX_REPLY_BYTES`].
#[derive(Debug, Default)]
pub struct ReplyParser {
    pending: Option<Reply>,
    /// What `pending` costs so far (text plus [`LINE_COST`] a line).
    bytes: usize,
    /// A reply has begun: a line without a code before then means the
    /// peer is no FTP server (an SSH or HTTP one, say).
    greeted: bool,
}

impl ReplyParser {
    /// A parser with nothing buffered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a multi-line reply has begun and not yet ended.
    pub fn in_progress(&self) -> bool {
        self.pending.is_some()
    }

    /// Lines of the unfinished multi-line reply received so far.
    pub fn pending_lines(&self) -> usize {
        self.pending.as_ref().map_or(0, |p| p.lines.len())
    }

    /// Feed one line (without CRLF). Returns a reply when one completes.
    /// Lines outside a reply that do not start with a code are ignored
    /// (GCT echoes raw CRLF inside some 501 texts), but not before the
    /// first reply ([`ReplyError::NotFtp`]).
    pub fn handle_line(&mut self, line: &str) -> Result<Option<Reply>, ReplyError> {
        let code = line_code(line);
        if self.pending.is_some() {
            return self.continue_reply(line, code);
        }
        if code.is_none() && !self.greeted && !line.trim().is_empty() {
            let shown: String = line.chars().take(40).collect();
            return Err(ReplyError::NotFtp(shown));
        }
        self.greeted = true;
        match code {
            Some((c, '-')) => {
                self.bytes = line.len() + LINE_COST;
                self.pending = Some(Reply { code: c, lines: vec![line[4..].to_string()] });
                Ok(None)
            }
            Some((c, _)) => Ok(Some(Reply { code: c, lines: vec![line.get(4..).unwrap_or("").to_string()] })),
            None => Ok(None),
        }
    }

    /// A line inside a multi-line reply: its end, or one more line.
    fn continue_reply(&mut self, line: &str, code: Option<(u16, char)>) -> Result<Option<Reply>, ReplyError> {
        let Some(p) = self.pending.as_mut() else { return Ok(None) };
        if let Some((c, ' ')) = code {
            if c == p.code {
                // A bare "NNN" (no text) also ends the reply.
                p.lines.push(line.get(4..).unwrap_or("").to_string());
                return Ok(self.pending.take());
            }
        }
        if p.lines.len() >= MAX_REPLY_LINES {
            self.pending = None;
            return Err(ReplyError::TooLong(MAX_REPLY_LINES));
        }
        self.bytes += line.len() + LINE_COST;
        if self.bytes > MAX_REPLY_BYTES {
            self.pending = None;
            return Err(ReplyError::TooLarge(MAX_REPLY_BYTES));
        }
        let body = match code {
            Some((c, '-')) if c == p.code => &line[4..],
            _ => line,
        };
        p.lines.push(body.to_string());
        Ok(None)
    }
}

fn line_code(line: &str) -> Option<(u16, char)> {
    let b = line.as_bytes();
    if b.len() < 3 || !b[..3].iter().all(u8::is_ascii_digit) || !(b'1'..=b'5').contains(&b[0]) {
        return None;
    }
    let sep = match b.get(3) {
        None => ' ',
        Some(b' ') => ' ',
        Some(b'-') => '-',
        Some(_) => return None,
    };
    Some((line[..3].parse().ok()?, sep))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_complete_carries_a_tree_count() {
        let tree = Reply::transfer_complete(Some(5000));
        assert_eq!(tree.encode(), b"226 Transfer Complete: 5000 files.\r\n");
        assert_eq!(tree.files_completed(), Some(5000));
        let empty = Reply::transfer_complete(Some(0));
        assert_eq!(empty.encode(), b"226 Transfer Complete: 0 files.\r\n");
        assert_eq!(empty.files_completed(), Some(0), "an empty tree, not a file");
        let file = Reply::transfer_complete(None);
        assert_eq!(file.encode(), b"226 Transfer Complete.\r\n");
        assert_eq!(file.files_completed(), None);
        assert_eq!(Reply::new(226, "Transfer Complete: many files.").files_completed(), None);
        let listed = Reply::transfer_complete(None);
        assert_eq!(listed.clone().with_names_left_out(0), listed);
        assert_eq!(listed.clone().with_names_left_out(3).names_left_out(), 3);
        assert_eq!(listed.names_left_out(), 0);
    }

    /// A tree with special files left out: the count stays where older
    /// clients read it, the skipped count survives the wire, and none
    /// skipped is the plain reply.
    #[test]
    fn tree_complete_says_how_many_special_files_were_skipped() {
        let r = Reply::tree_complete(Some(5), 2);
        let wire = String::from_utf8(r.encode()).unwrap();
        assert_eq!(
            wire,
            "226-Transfer Complete: 5 files.\r\n 2 special file(s) skipped (FIFOs, devices, sockets are not copied).\r\n226 End.\r\n"
        );
        let got = through_the_wire(&r);
        assert!(got.is_ok());
        assert_eq!((got.files_completed(), got.special_files_skipped()), (Some(5), 2));
        assert_eq!(Reply::tree_complete(Some(5), 0), Reply::transfer_complete(Some(5)));
        assert_eq!(Reply::tree_complete(Some(5), 0).special_files_skipped(), 0);
        assert_eq!(Reply::tree_complete(Some(0), 1).special_files_skipped(), 1);
        assert_eq!(Reply::new(550, "2 special file(s) skipped.").special_files_skipped(), 0);
    }

    #[test]
    fn a_tree_reply_says_its_data_bytes() {
        let r = Reply::tree_complete(Some(5), 2).with_data_bytes(Some(1_275_000));
        let wire = String::from_utf8(r.encode()).unwrap();
        assert!(wire.ends_with(" 1275000 bytes of file data.\r\n226 End.\r\n"), "{wire}");
        let got = through_the_wire(&r);
        assert_eq!(
            (got.files_completed(), got.special_files_skipped(), got.data_bytes()),
            (Some(5), 2, Some(1_275_000))
        );
        let alone = Reply::transfer_complete(Some(0)).with_data_bytes(Some(0));
        assert_eq!((alone.files_completed(), alone.data_bytes()), (Some(0), Some(0)));
        assert_eq!(Reply::tree_complete(Some(5), 0).with_data_bytes(None), Reply::transfer_complete(Some(5)));
        assert_eq!(Reply::transfer_complete(Some(5)).data_bytes(), None);
        assert_eq!(Reply::multi(451, "x", ["7 bytes of file data.".to_string()]).data_bytes(), None);
    }

    #[test]
    fn multi_roundtrip() {
        let r = Reply::multi(211, "Extensions supported", vec![" PARALLEL".into(), "SIZE".into()]);
        let wire = String::from_utf8(r.encode()).unwrap();
        assert_eq!(wire, "211-Extensions supported\r\n PARALLEL\r\n SIZE\r\n211 End.\r\n");
        let mut p = ReplyParser::new();
        let mut got = None;
        for l in wire.split("\r\n").filter(|l| !l.is_empty()) {
            got = p.handle_line(l).unwrap();
        }
        let got = got.unwrap();
        assert_eq!(got.code, 211);
        assert_eq!(got.lines[1], " PARALLEL");
    }

    #[test]
    fn gct_echoed_crlf_is_ignored() {
        let mut p = ReplyParser::new();
        assert_eq!(p.handle_line("501 'TYPE E").unwrap().unwrap().code, 501);
        assert_eq!(p.handle_line("' unrecognized type.").unwrap(), None);
        assert_eq!(p.handle_line("200 ok").unwrap().unwrap().code, 200);
    }

    #[test]
    fn a_first_line_without_a_code_is_no_ftp_server() {
        let mut p = ReplyParser::new();
        let e = p.handle_line("SSH-2.0-OpenSSH_9.6").unwrap_err();
        assert_eq!(e.to_string(), "not an FTP server: it began with \"SSH-2.0-OpenSSH_9.6\"");
        let mut p = ReplyParser::new();
        assert_eq!(p.handle_line("").unwrap(), None, "an empty line first is let pass");
        assert_eq!(p.handle_line("220 ready").unwrap().unwrap().code, 220);
        assert_eq!(p.handle_line("stray text").unwrap(), None, "later, as GCT writes it, ignored");
    }

    #[test]
    fn bare_code_ends_multi_line_reply() {
        // Found by the property tests: this used to panic slicing "211"[4..].
        let mut p = ReplyParser::new();
        assert_eq!(p.handle_line("211-Extensions supported").unwrap(), None);
        let r = p.handle_line("211").unwrap().unwrap();
        assert_eq!(r, Reply { code: 211, lines: vec!["Extensions supported".into(), String::new()] });
    }

    #[test]
    fn injected_newlines_are_neutralised() {
        let r = Reply::new(550, "no such file: a\r\n230 evil");
        assert_eq!(r.encode().iter().filter(|&&b| b == b'\n').count(), 1);
    }

    /// A multi-line reply is refused once it holds 1 MiB or 10 000 lines,
    /// whichever comes first, and then the parser starts afresh.
    #[test]
    fn a_multi_line_reply_is_bounded_in_bytes_and_lines() {
        let mut p = ReplyParser::new();
        assert_eq!(p.handle_line("211-Extensions").unwrap(), None);
        let long = format!(" {}", "B".repeat(8000));
        let mut fed = 1;
        let err = loop {
            match p.handle_line(&long) {
                Ok(None) => fed += 1,
                Ok(Some(r)) => panic!("no end was sent: {}", r.code),
                Err(e) => break e,
            }
        };
        assert_eq!(err, ReplyError::TooLarge(MAX_REPLY_BYTES));
        assert!(fed * 8000 <= MAX_REPLY_BYTES && fed > 100, "{fed} lines");
        assert!(!p.in_progress());
        assert_eq!(p.handle_line("200 ok").unwrap().unwrap().code, 200);
        assert_eq!(p.handle_line("211-x").unwrap(), None);
        let short = (0..MAX_REPLY_LINES).map(|_| p.handle_line(" y")).find_map(Result::err);
        assert_eq!(short, Some(ReplyError::TooLong(MAX_REPLY_LINES)));
    }
}
