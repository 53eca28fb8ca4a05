//! Command-line tools (helm, kubectl, the cluster scripts) and plain HTTP, for tests.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long [`http_get`] waits for a whole answer.
pub(crate) const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs a command-line tool to completion: (success, stdout, stderr).
#[allow(
    clippy::panic,
    reason = "a test helper: a tool that cannot start fails the test"
)]
pub async fn run_tool(cmd: std::process::Command) -> (bool, String, String) {
    let shown = format!("{cmd:?}");
    let out = tokio::process::Command::from(cmd)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {shown}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a tool that must succeed (the test fails with its output otherwise); returns its stdout.
#[allow(clippy::panic, reason = "a test assertion: the failing test's message")]
pub async fn run_ok(cmd: std::process::Command) -> String {
    let shown = format!("{cmd:?}");
    let (ok, stdout, stderr) = run_tool(cmd).await;
    if !ok {
        panic!("{shown} failed:\n{stderr}\n{stdout}");
    }
    stdout
}

/// GETs `path` from `addr` over HTTP/1.1: (status code, body); None when nothing answers there,
/// the connection fails, or the answer takes longer than 5 s.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    tokio::time::timeout(HTTP_TIMEOUT, async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        parse_response(&response)
    })
    .await
    .ok()
    .flatten()
}

/// An HTTP/1.1 answer's status code and body (de-chunked); None when it is cut short.
pub(crate) fn parse_response(response: &str) -> Option<(u16, String)> {
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response, ""));
    let chunked = head.lines().any(|l| {
        l.split_once(':').is_some_and(|(name, value)| {
            name.eq_ignore_ascii_case("transfer-encoding")
                && value.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Some((code, body))
}

/// The body of a `Transfer-Encoding: chunked` answer (Go's servers chunk any answer they don't
/// know the length of in advance); None when it is cut short.
fn dechunk(mut rest: &str) -> Option<String> {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
}

#[cfg(test)]
mod tests {
    use super::dechunk;

    #[test]
    fn a_chunked_body_is_joined_and_a_cut_one_refused() {
        assert_eq!(
            dechunk("5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n").as_deref(),
            Some("hello, world")
        );
        assert_eq!(dechunk("5\r\nhel"), None);
    }
}
