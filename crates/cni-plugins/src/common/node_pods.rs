//! Telling the node agent about a pod at ADD and DEL, where the config names its pod socket
//! (`rcniNodeSocket`; the protocol is `cni_types::node_agent`'s): one JSON line each way
//! over a unix stream, synchronously, with a deadline. At ADD the agent answers once no
//! other pod's policy program holds the new addresses; an agent that cannot be reached
//! refuses the ADD with code 11 (try again later), as a dead agent's status file does. At
//! DEL the agent is told before the addresses are released, at best: an agent that cannot
//! be reached never fails a DEL.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use cni_plugin::CmdArgs;
use cni_types::node_agent::{self, PodAdded, PodAnswer, PodMessage};
use cni_types::{code, CniError, IpConfig};

/// How long an ADD waits for the agent's answer.
const ADD_DEADLINE: Duration = Duration::from_secs(5);
/// How long a DEL waits for it.
const DEL_DEADLINE: Duration = Duration::from_secs(2);

/// Tells the agent named by the config that `ips` are this attachment's; whether there was
/// an agent to tell. Refused (code 11 unless the agent says otherwise) when the agent
/// cannot be reached or refuses.
pub fn announce(args: &CmdArgs, ips: &[IpConfig]) -> Result<bool, CniError> {
    let Some(socket) = node_agent::socket(&args.conf.raw)? else {
        return Ok(false);
    };
    let cni_args = args.cni_args()?;
    let message = PodMessage::Add(PodAdded {
        container_id: args.container_id.clone(),
        ifname: args.ifname.clone(),
        netns: args.netns.to_string_lossy().into_owned(),
        namespace: cni_args.get("K8S_POD_NAMESPACE").map(str::to_string),
        name: cni_args.get("K8S_POD_NAME").map(str::to_string),
        ips: ips.iter().map(|ip| ip.address.addr()).collect(),
    });
    let agent = agent_name(args)?;
    match exchange(&socket, &message, ADD_DEADLINE) {
        Ok(answer) if answer.ok => Ok(true),
        Ok(answer) => Err(CniError::new(
            answer.code.unwrap_or(code::TRY_AGAIN_LATER),
            format!(
                "{agent} refused the pod: {}",
                answer.msg.as_deref().unwrap_or("no reason given")
            ),
        )),
        Err(e) => {
            let what = match e.kind() {
                ErrorKind::ConnectionRefused | ErrorKind::NotFound => "is not running",
                _ => "cannot be told about the pod",
            };
            Err(CniError::new(
                code::TRY_AGAIN_LATER,
                format!("{agent} {what} (its pod socket {socket}: {e}): try again later"),
            ))
        }
    }
}

/// Tells the agent named by the config that the attachment's addresses are about to be
/// released; a failure is logged and otherwise ignored.
pub fn forget(args: &CmdArgs) {
    let Ok(Some(socket)) = node_agent::socket(&args.conf.raw) else {
        return;
    };
    let message = PodMessage::Del {
        container_id: args.container_id.clone(),
        ifname: args.ifname.clone(),
    };
    match exchange(&socket, &message, DEL_DEADLINE) {
        Ok(answer) if answer.ok => {}
        Ok(answer) => log::warn!(
            "the node agent did not take the DEL: {}",
            answer.msg.as_deref().unwrap_or("no reason given")
        ),
        Err(e) => log::warn!("the node agent cannot be told about the DEL (socket {socket}: {e})"),
    }
}

/// STATUS: the agent named by the config listens on its pod socket (else code 50: no ADD
/// could be told).
pub fn status(args: &CmdArgs) -> Result<(), CniError> {
    let Some(socket) = node_agent::socket(&args.conf.raw)? else {
        return Ok(());
    };
    match UnixStream::connect(&socket) {
        Ok(_) => Ok(()),
        Err(e) => Err(CniError::new(
            code::PLUGIN_NOT_AVAILABLE,
            format!(
                "{} is not running (its pod socket {socket}: {e})",
                agent_name(args)?
            ),
        )),
    }
}

/// `rcni-node on <node>`, for messages.
fn agent_name(args: &CmdArgs) -> Result<String, CniError> {
    let node = node_agent::node_name(&args.conf.raw)?;
    Ok(format!(
        "rcni-node on {}",
        node.as_deref().unwrap_or("this node")
    ))
}

/// Sends `message` and reads the answer, each within `deadline`.
fn exchange(socket: &str, message: &PodMessage, deadline: Duration) -> std::io::Result<PodAnswer> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_write_timeout(Some(deadline))?;
    stream.set_read_timeout(Some(deadline))?;
    let mut line = serde_json::to_vec(message)?;
    line.push(b'\n');
    stream.write_all(&line)?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    if answer.is_empty() {
        return Err(std::io::Error::other("the agent closed the connection"));
    }
    Ok(serde_json::from_str(&answer)?)
}
