//! Prometheus remote-write and remote-read: the protocol messages (`proto.rs`) and the
//! snappy-framed codec (`codec.rs`) shared by the receiver (`/api/v1/write`, `/api/v1/read` in
//! `api/`) and the sender that forwards the WAL to a remote store.

pub mod codec;
pub mod proto;
pub mod receiver;
pub mod sender;
pub mod wire;
