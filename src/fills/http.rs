//! HTTP front of the reliable lane (to be written).
