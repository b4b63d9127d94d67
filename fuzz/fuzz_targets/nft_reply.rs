#![no_main]
// cargo-fuzz wrapper; the body is cni_fuzz::nft_reply, which the replay test also runs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cni_fuzz::nft_reply(data));
