//! x_tables matches in iptables-nft's encoding, for rules that `iptables-nft -S` must be able
//! to show. iptables-nft 1.8 has no native form of `-m conntrack --ctstate`: it writes the
//! `conntrack` match (revision 3) through `nft_compat`, and a rule with a native `ct state`
//! makes `iptables-nft -S` refuse the whole table ("table `filter' is incompatible").

use crate::expr::Expr;

/// Size of `struct xt_conntrack_mtinfo3` (eight 16-byte address/mask unions, two u32, twelve
/// u16), padded to `XT_ALIGN` (8) as iptables sends it.
const CONNTRACK_INFO3_LEN: usize = 168;
/// Offset of `match_flags`: after 8 × 16 address bytes, 2 × u32 expiry and 5 × u16 ports.
const MATCH_FLAGS_OFFSET: usize = 128 + 8 + 10;
/// Offset of `state_mask`: after `match_flags` and `invert_flags`.
const STATE_MASK_OFFSET: usize = MATCH_FLAGS_OFFSET + 4;
/// `XT_CONNTRACK_STATE`: the match tests the state.
const XT_CONNTRACK_STATE: u16 = 1;

/// `-m conntrack --ctstate <bits>`, with `bits` from [`crate::ct_state`] (x_tables uses the
/// same state bits as nf_tables' `ct state`).
pub fn conntrack_state(bits: u32) -> Expr {
    let mut info = vec![0u8; CONNTRACK_INFO3_LEN];
    let put = |info: &mut Vec<u8>, at: usize, v: u16| {
        info[at..at + 2].copy_from_slice(&v.to_ne_bytes());
    };
    put(&mut info, MATCH_FLAGS_OFFSET, XT_CONNTRACK_STATE);
    // The state bits fit in 16 bits (the highest, UNTRACKED, is 1 << 6).
    put(&mut info, STATE_MASK_OFFSET, (bits & 0xffff) as u16);
    Expr::XtMatch {
        name: "conntrack".into(),
        rev: 3,
        info,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ct_state;

    #[test]
    fn related_established_sets_the_state_flag_and_mask() {
        let Expr::XtMatch { name, rev, info } =
            conntrack_state(ct_state::RELATED | ct_state::ESTABLISHED)
        else {
            panic!("not an xt match");
        };
        assert_eq!((name.as_str(), rev, info.len()), ("conntrack", 3, 168));
        assert_eq!(u16::from_ne_bytes([info[146], info[147]]), 1);
        assert_eq!(u16::from_ne_bytes([info[150], info[151]]), 6);
        let rest: usize = info.iter().map(|b| usize::from(*b != 0)).sum();
        assert_eq!(rest, 2, "only the flag and the mask are set");
    }
}
