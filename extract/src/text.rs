//! Plain text: UTF-8, UTF-16 with a byte order mark, or an encoding `chardetng` detects.

use encoding_rs::{UTF_8, UTF_16BE, UTF_16LE};

/// The text of bytes: the encoding of a byte order mark, else UTF-8 when valid, else the
/// encoding `chardetng` guesses. Line ends become `\n`.
pub fn decode(bytes: &[u8]) -> String {
    let text = if let Some((encoding, bom)) = encoding_rs::Encoding::for_bom(bytes) {
        let (text, _) = encoding.decode_without_bom_handling(&bytes[bom..]);
        text.into_owned()
    } else if let Ok(text) = std::str::from_utf8(bytes) {
        text.to_owned()
    } else {
        let mut detector = chardetng::EncodingDetector::new();
        detector.feed(bytes, true);
        let encoding = detector.guess(None, true);
        let (text, _) = encoding.decode_without_bom_handling(bytes);
        text.into_owned()
    };
    text.replace("\r\n", "\n").replace('\r', "\n")
}

/// Whether bytes look like text: a UTF-16 byte order mark, or no NUL byte in the first 8 KiB.
pub fn looks_textual(bytes: &[u8]) -> bool {
    if let Some((encoding, _)) = encoding_rs::Encoding::for_bom(bytes) {
        return encoding == UTF_8 || encoding == UTF_16LE || encoding == UTF_16BE;
    }
    let head = bytes.get(..8192).unwrap_or(bytes);
    !head.contains(&0)
}

/// A plain-text file's text: decoded, trailing spaces of lines and surrounding blank lines
/// removed.
pub fn plain(bytes: &[u8]) -> String {
    let text = decode(bytes);
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    lines.join("\n").trim_matches('\n').to_owned()
}
