//! The wire form of remote-write and remote-read bodies: a protobuf message compressed with
//! snappy's block format (not the framed/stream format).

use prost::Message;

/// Why a remote-write or remote-read body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The body is not valid snappy block data.
    #[error("snappy decode: {0}")]
    Snappy(#[from] snap::Error),
    /// The decompressed bytes are not the expected protobuf message.
    #[error("protobuf decode: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// The decompressed size announced by the body exceeds the limit.
    #[error("decompressed body of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Size announced by the snappy header.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
}

/// Decompress a snappy block body and decode it as `M`, refusing bodies that announce more
/// than `max_decoded` bytes before allocating for them.
pub fn decode<M: Message + Default>(body: &[u8], max_decoded: usize) -> Result<M, CodecError> {
    let size = snap::raw::decompress_len(body)?;
    if size > max_decoded {
        return Err(CodecError::TooLarge {
            size,
            limit: max_decoded,
        });
    }
    let raw = snap::raw::Decoder::new().decompress_vec(body)?;
    Ok(M::decode(raw.as_slice())?)
}

/// Encode `msg` as protobuf and compress it with snappy's block format.
pub fn encode<M: Message>(msg: &M) -> Vec<u8> {
    let raw = msg.encode_to_vec();
    // Compression of an in-memory buffer cannot fail except for inputs over 4 GiB minus a
    // little, which no caller builds (batches are bounded by max_samples_per_send).
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::proto::{Label, Sample, TimeSeries, WriteRequest};

    #[test]
    fn round_trip_and_errors() {
        let req = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label {
                    name: "__name__".into(),
                    value: "vllm:num_requests_running".into(),
                }],
                samples: vec![Sample {
                    value: f64::from_bits(0x7ff0000000000002),
                    timestamp: 1_700_000_000_007,
                }],
                exemplars: vec![],
            }],
            metadata: vec![],
        };
        let body = encode(&req);
        let back: WriteRequest = decode(&body, 1 << 20).unwrap();
        assert_eq!(back.timeseries[0].labels, req.timeseries[0].labels);
        assert_eq!(
            back.timeseries[0].samples[0].value.to_bits(),
            0x7ff0000000000002
        );
        assert!(matches!(
            decode::<WriteRequest>(b"not snappy at all", 1 << 20),
            Err(CodecError::Snappy(_)) | Err(CodecError::Protobuf(_))
        ));
        assert!(matches!(
            decode::<WriteRequest>(&body, 4),
            Err(CodecError::TooLarge { .. })
        ));
    }
}
