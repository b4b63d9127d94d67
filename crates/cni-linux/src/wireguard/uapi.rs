//! The configuration socket of a userspace WireGuard (wireguard-go): `get=1` and `set=1`
//! operations of `key=value` lines ended by an empty line, each answered with `errno=N` and an
//! empty line (<https://www.wireguard.com/xplatform/#configuration-protocol>). Keys are in
//! hex there.
//!
//! One connection carries any number of operations (wireguard-go's `IpcHandle` loops), so a
//! client keeps it open; a broken one (the process restarted) is opened again once per
//! request. A refused `set` leaves the rest of its lines unread on the server's side, which
//! then misreads them, so the connection is dropped after any error. Every read and write has
//! a deadline: a hung process cannot hang its caller.
//!
//! The socket's server is the process to supervise: [`UserspaceDevice::server_pid`] asks the
//! kernel who it is (`SO_PEERCRED`), with no pid file to go stale.

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use ipnet::IpNet;
use nix::sys::socket::{getsockopt, sockopt};

use super::{Device, DeviceControl, DeviceUpdate, Error, Peer, PeerChange, PeerConfig};
use super::{PublicKey, SecretKey};

/// Where wireguard-go (and `wg(8)`) put the configuration socket of a device.
pub const SOCKET_DIR: &str = "/var/run/wireguard";

/// How long one request may take.
const DEADLINE: Duration = Duration::from_secs(10);

/// The configuration socket of the device `name`.
pub fn socket_path(name: &str) -> PathBuf {
    Path::new(SOCKET_DIR).join(format!("{name}.sock"))
}

/// A client of one device's configuration socket.
#[derive(Debug)]
pub struct UserspaceDevice {
    path: PathBuf,
    conn: Option<BufReader<UnixStream>>,
}

impl UserspaceDevice {
    /// A client of the socket at `path` (connected on first use).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        UserspaceDevice {
            path: path.into(),
            conn: None,
        }
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn socket_error(&self, source: io::Error) -> Error {
        Error::Socket {
            path: self.path.display().to_string(),
            source,
        }
    }

    fn connection(&mut self) -> Result<&mut BufReader<UnixStream>, Error> {
        if self.conn.is_none() {
            let stream = UnixStream::connect(&self.path).map_err(|e| self.socket_error(e))?;
            stream
                .set_read_timeout(Some(DEADLINE))
                .and_then(|()| stream.set_write_timeout(Some(DEADLINE)))
                .map_err(|e| self.socket_error(e))?;
            self.conn = Some(BufReader::new(stream));
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    /// The process serving the socket, as the kernel saw it when it listened.
    pub fn server_pid(&mut self) -> Result<u32, Error> {
        let conn = self.connection()?;
        let creds = getsockopt(conn.get_ref(), sockopt::PeerCredentials);
        match creds {
            Ok(c) => Ok(c.pid() as u32),
            Err(e) => {
                self.conn = None;
                Err(self.socket_error(e.into()))
            }
        }
    }

    /// Sends `request` and returns the answer's lines (without `errno=0`), on the kept
    /// connection, or on a new one if the kept one turns out to be broken.
    fn exchange(&mut self, request: &str) -> Result<Vec<String>, Error> {
        let had_connection = self.conn.is_some();
        match self.exchange_once(request) {
            Err(Error::Socket { .. }) if had_connection => self.exchange_once(request),
            other => other,
        }
    }

    fn exchange_once(&mut self, request: &str) -> Result<Vec<String>, Error> {
        let result = self.try_exchange(request);
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    fn try_exchange(&mut self, request: &str) -> Result<Vec<String>, Error> {
        let path = self.path.display().to_string();
        let conn = self.connection()?;
        let io_err = |source: io::Error| Error::Socket {
            path: path.clone(),
            source,
        };
        conn.get_mut()
            .write_all(request.as_bytes())
            .map_err(io_err)?;
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            if conn.read_line(&mut line).map_err(io_err)? == 0 {
                return Err(io_err(io::ErrorKind::UnexpectedEof.into()));
            }
            let line = line.trim_end_matches('\n');
            if line.is_empty() {
                return Err(Error::Malformed {
                    path,
                    what: "the answer ended without errno".into(),
                });
            }
            if let Some(errno) = line.strip_prefix("errno=") {
                let errno: i64 = errno.parse().map_err(|_| Error::Malformed {
                    path: path.clone(),
                    what: format!("errno {errno:?}"),
                })?;
                // The empty line closing the answer.
                let mut end = String::new();
                conn.read_line(&mut end).map_err(io_err)?;
                return match errno {
                    0 => Ok(lines),
                    errno => Err(Error::Refused { path, errno }),
                };
            }
            lines.push(line.to_string());
        }
    }
}

impl DeviceControl for UserspaceDevice {
    fn read(&mut self) -> Result<Device, Error> {
        let lines = self.exchange("get=1\n\n")?;
        parse_get(&lines).map_err(|what| Error::Malformed {
            path: self.path.display().to_string(),
            what,
        })
    }

    fn apply(&mut self, update: &DeviceUpdate) -> Result<(), Error> {
        if update.is_empty() {
            return Ok(());
        }
        self.exchange(&set_request(update)).map(|_| ())
    }
}

/// The `set=1` request for `update`.
pub fn set_request(update: &DeviceUpdate) -> String {
    let mut out = String::from("set=1\n");
    if let Some(key) = &update.private_key {
        let _ = writeln!(out, "private_key={}", key.expose_hex());
    }
    if let Some(port) = update.listen_port {
        let _ = writeln!(out, "listen_port={port}");
    }
    if update.replace_peers {
        out.push_str("replace_peers=true\n");
    }
    for change in &update.peers {
        let _ = writeln!(out, "public_key={}", change.public_key().to_hex());
        match change {
            PeerChange::Remove(_) => out.push_str("remove=true\n"),
            PeerChange::Set(c) => {
                let psk = c.preshared_key.unwrap_or(SecretKey::from_bytes([0; 32]));
                let _ = writeln!(out, "preshared_key={}", psk.expose_hex());
                if let Some(endpoint) = c.endpoint {
                    let _ = writeln!(out, "endpoint={endpoint}");
                }
                let _ = writeln!(
                    out,
                    "persistent_keepalive_interval={}",
                    c.persistent_keepalive
                );
                out.push_str("replace_allowed_ips=true\n");
                for ip in &c.allowed_ips {
                    let _ = writeln!(out, "allowed_ip={ip}");
                }
            }
        }
    }
    out.push('\n');
    out
}

/// A `get=1` answer's lines as a [`Device`].
pub fn parse_get(lines: &[String]) -> Result<Device, String> {
    let mut device = Device::default();
    let mut peer: Option<PeerFields> = None;
    for line in lines {
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("line {line:?} is not key=value"))?;
        let bad = |what: &str| format!("{key}: {what} {value:?}");
        if key == "public_key" {
            device.peers.extend(peer.take().map(PeerFields::finish));
            let key = PublicKey::from_hex(value).map_err(|e| bad(&e.to_string()))?;
            peer = Some(PeerFields::new(key));
            continue;
        }
        match (&mut peer, key) {
            (None, "private_key") => {
                let k = SecretKey::from_hex(value).map_err(|e| bad(&e.to_string()))?;
                device.private_key = Some(k).filter(|k| !k.is_zero());
            }
            (None, "listen_port") => {
                device.listen_port = value.parse().map_err(|_| bad("not a port"))?
            }
            (None, _) => {} // fwmark and what later versions add
            (Some(p), key) => p.set(key, value).map_err(|e| bad(&e))?,
        }
    }
    device.peers.extend(peer.map(PeerFields::finish));
    Ok(device)
}

/// A peer being read from a `get` answer.
struct PeerFields {
    peer: Peer,
    handshake_sec: u64,
    handshake_nsec: u32,
}

impl PeerFields {
    fn new(public_key: PublicKey) -> Self {
        PeerFields {
            peer: Peer {
                config: PeerConfig {
                    public_key,
                    preshared_key: None,
                    endpoint: None,
                    persistent_keepalive: 0,
                    allowed_ips: Vec::new(),
                },
                last_handshake: None,
                rx_bytes: 0,
                tx_bytes: 0,
            },
            handshake_sec: 0,
            handshake_nsec: 0,
        }
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let number = |v: &str| v.parse::<u64>().map_err(|_| "not a number".to_string());
        let c = &mut self.peer.config;
        match key {
            "preshared_key" => {
                c.preshared_key = Some(SecretKey::from_hex(value).map_err(|e| e.to_string())?)
            }
            "endpoint" => {
                c.endpoint = Some(
                    value
                        .parse::<SocketAddr>()
                        .map_err(|_| "not an address".to_string())?,
                )
            }
            "persistent_keepalive_interval" => {
                c.persistent_keepalive = value.parse().map_err(|_| "not a number".to_string())?
            }
            "allowed_ip" => c.allowed_ips.push(
                value
                    .parse::<IpNet>()
                    .map_err(|_| "not a prefix".to_string())?,
            ),
            "last_handshake_time_sec" => self.handshake_sec = number(value)?,
            "last_handshake_time_nsec" => self.handshake_nsec = number(value)? as u32,
            "rx_bytes" => self.peer.rx_bytes = number(value)?,
            "tx_bytes" => self.peer.tx_bytes = number(value)?,
            _ => {} // protocol_version and what later versions add
        }
        Ok(())
    }

    fn finish(mut self) -> Peer {
        if self.handshake_sec != 0 || self.handshake_nsec != 0 {
            self.peer.last_handshake = Some(
                SystemTime::UNIX_EPOCH
                    + Duration::new(self.handshake_sec, self.handshake_nsec.min(999_999_999)),
            );
        }
        self.peer.config = self.peer.config.normalized();
        self.peer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> PublicKey {
        PublicKey([byte; 32])
    }

    #[test]
    fn a_get_answer_reads_as_a_device() {
        let answer = format!(
            "private_key={}\nlisten_port=51820\nfwmark=0\n\
             public_key={}\npreshared_key={}\nprotocol_version=1\nendpoint=198.18.0.12:51820\n\
             last_handshake_time_sec=1700000000\nlast_handshake_time_nsec=5\ntx_bytes=10\n\
             rx_bytes=20\npersistent_keepalive_interval=25\nallowed_ip=198.19.2.0/24\n\
             allowed_ip=2001:2:1:2::/64\n\
             public_key={}\npreshared_key={}\nprotocol_version=1\nendpoint=[2001:2::13]:51821\n\
             last_handshake_time_sec=0\nlast_handshake_time_nsec=0\ntx_bytes=0\nrx_bytes=0\n\
             persistent_keepalive_interval=0\nallowed_ip=198.19.3.0/24",
            "11".repeat(32),
            key(2).to_hex(),
            "00".repeat(32),
            key(3).to_hex(),
            "07".repeat(32),
        );
        let lines: Vec<String> = answer.lines().map(String::from).collect();
        let d = parse_get(&lines).unwrap();
        assert_eq!(d.private_key, Some(SecretKey::from_bytes([0x11; 32])));
        assert_eq!(d.listen_port, 51820);
        assert_eq!(d.peers.len(), 2);
        let a = &d.peers[0];
        assert_eq!(a.config.public_key, key(2));
        assert_eq!(a.config.preshared_key, None, "zeros mean none");
        assert_eq!(
            a.config.endpoint,
            Some("198.18.0.12:51820".parse().unwrap())
        );
        assert_eq!(a.config.persistent_keepalive, 25);
        assert_eq!(
            a.config.allowed_ips,
            vec![
                "198.19.2.0/24".parse::<IpNet>().unwrap(),
                "2001:2:1:2::/64".parse().unwrap()
            ]
        );
        assert_eq!(
            a.last_handshake,
            Some(SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 5))
        );
        assert_eq!((a.rx_bytes, a.tx_bytes), (20, 10));
        let b = &d.peers[1];
        assert_eq!(b.last_handshake, None);
        assert_eq!(
            b.config.endpoint,
            Some("[2001:2::13]:51821".parse().unwrap())
        );
        assert_eq!(b.config.preshared_key, Some(SecretKey::from_bytes([7; 32])));
        assert!(parse_get(&["listen_port=x".into()]).is_err());
        assert!(parse_get(&["junk".into()]).is_err());
    }

    #[test]
    fn a_set_request_names_every_field_and_ends_with_an_empty_line() {
        let update = DeviceUpdate {
            private_key: Some(SecretKey::from_bytes([1; 32])),
            listen_port: Some(51820),
            replace_peers: true,
            peers: vec![
                PeerChange::Set(PeerConfig {
                    public_key: key(2),
                    preshared_key: None,
                    endpoint: Some("[2001:2::12]:51821".parse().unwrap()),
                    persistent_keepalive: 0,
                    allowed_ips: vec!["2001:2:1:2::/64".parse().unwrap()],
                }),
                PeerChange::Remove(key(3)),
            ],
        };
        let text = set_request(&update);
        let want = format!(
            "set=1\nprivate_key={}\nlisten_port=51820\nreplace_peers=true\n\
             public_key={}\npreshared_key={}\nendpoint=[2001:2::12]:51821\n\
             persistent_keepalive_interval=0\nreplace_allowed_ips=true\n\
             allowed_ip=2001:2:1:2::/64\npublic_key={}\nremove=true\n\n",
            "01".repeat(32),
            key(2).to_hex(),
            "00".repeat(32),
            key(3).to_hex()
        );
        assert_eq!(text, want);
    }

    /// A one-connection server answering each request with `answers` in turn.
    fn serve(
        dir: &Path,
        answers: Vec<&'static str>,
    ) -> (PathBuf, std::thread::JoinHandle<Vec<String>>) {
        let path = dir.join("wg-test.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut writer = stream;
            let mut requests = Vec::new();
            for answer in answers {
                let mut request = String::new();
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    request.push_str(&line);
                    if line == "\n" {
                        break;
                    }
                }
                requests.push(request);
                writer.write_all(answer.as_bytes()).unwrap();
            }
            requests
        });
        (path, server)
    }

    #[test]
    fn requests_share_one_connection_and_a_refusal_is_an_error() {
        let dir = std::env::temp_dir().join(format!("rcni-uapi-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (path, server) = serve(
            &dir,
            vec!["listen_port=51820\nerrno=0\n\n", "errno=-22\n\n"],
        );
        let mut dev = UserspaceDevice::new(&path);
        assert_eq!(dev.server_pid().unwrap(), std::process::id());
        assert_eq!(dev.read().unwrap().listen_port, 51820);
        let refused = dev.apply(&DeviceUpdate {
            listen_port: Some(1),
            ..DeviceUpdate::default()
        });
        assert!(matches!(refused, Err(Error::Refused { errno: -22, .. })));
        assert_eq!(
            server.join().unwrap(),
            ["get=1\n\n", "set=1\nlisten_port=1\n\n"]
        );
        // An empty update sends nothing.
        dev.apply(&DeviceUpdate::default()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
