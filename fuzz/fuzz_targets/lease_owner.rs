#![no_main]
// cargo-fuzz wrapper; the body is cni_fuzz::lease_owner, which the replay test also runs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cni_fuzz::lease_owner(data));
