#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tickgate_fuzz::cboe_pitch(data));
