//! Reporting several errors of a best-effort DEL as one.

use cni_types::CniError;

/// One error stays as it is; several are joined into one message with the first one's code.
pub fn combine(mut errors: Vec<CniError>) -> Result<(), CniError> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => {
            let msg = errors
                .iter()
                .map(|e| e.msg.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            Err(CniError::new(errors[0].code, msg))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combines_errors() {
        assert!(combine(vec![]).is_ok());
        let e = combine(vec![CniError::internal("a"), CniError::io("b")]).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (999, "a; b"));
        assert_eq!(combine(vec![CniError::io("b")]).unwrap_err().code, 5);
    }
}
