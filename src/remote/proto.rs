//! Prometheus remote-write 1.0 and remote-read messages, written from the public protocol
//! specification (`prompb/types.proto`, `prompb/remote.proto`) as `prost` messages.
//!
//! Native-histogram fields are not declared: prost skips unknown fields, so a request that
//! carries them decodes with their float samples only.

/// One label pair of a series.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Label {
    /// Label name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Label value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// One float sample.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Sample {
    /// The value (staleness markers travel as the special NaN).
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// An exemplar attached to a series (accepted and dropped: inferdb stores no exemplars).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Exemplar {
    /// The exemplar's own labels (e.g. `trace_id`).
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// Its value.
    #[prost(double, tag = "2")]
    pub value: f64,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "3")]
    pub timestamp: i64,
}

/// A series with its samples.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Labels, `__name__` included; senders sort them by name.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// Samples in time order.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    /// Exemplars.
    #[prost(message, repeated, tag = "3")]
    pub exemplars: Vec<Exemplar>,
}

/// The kind of a metric family, as in the exposition format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    /// No TYPE line.
    Unknown = 0,
    /// A counter.
    Counter = 1,
    /// A gauge.
    Gauge = 2,
    /// A classic histogram.
    Histogram = 3,
    /// An OpenMetrics gauge histogram.
    Gaugehistogram = 4,
    /// A summary.
    Summary = 5,
    /// An OpenMetrics info metric.
    Info = 6,
    /// An OpenMetrics state set.
    Stateset = 7,
}

/// HELP/TYPE/UNIT of one metric family.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricMetadata {
    /// The family's type.
    #[prost(enumeration = "MetricType", tag = "1")]
    pub r#type: i32,
    /// The family name (without `_bucket`/`_sum`/... suffixes).
    #[prost(string, tag = "2")]
    pub metric_family_name: String,
    /// HELP text.
    #[prost(string, tag = "4")]
    pub help: String,
    /// UNIT.
    #[prost(string, tag = "5")]
    pub unit: String,
}

/// The body of a remote-write 1.0 request (snappy block-compressed on the wire).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    /// Series with their samples.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    /// Metric metadata.
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

/// A label matcher's operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MatcherType {
    /// `=`
    Eq = 0,
    /// `!=`
    Neq = 1,
    /// `=~`
    Re = 2,
    /// `!~`
    Nre = 3,
}

/// One matcher of a remote-read query.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelMatcher {
    /// The operator.
    #[prost(enumeration = "MatcherType", tag = "1")]
    pub r#type: i32,
    /// Label name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Value or regular expression.
    #[prost(string, tag = "3")]
    pub value: String,
}

/// Hints a remote-read client sends about the query it serves (advisory only).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadHints {
    /// Query step in milliseconds.
    #[prost(int64, tag = "1")]
    pub step_ms: i64,
    /// The function wrapping the selector, if any.
    #[prost(string, tag = "2")]
    pub func: String,
    /// Start of the selection.
    #[prost(int64, tag = "3")]
    pub start_ms: i64,
    /// End of the selection.
    #[prost(int64, tag = "4")]
    pub end_ms: i64,
    /// Aggregation labels.
    #[prost(string, repeated, tag = "5")]
    pub grouping: Vec<String>,
    /// Whether `grouping` is `by` (else `without`).
    #[prost(bool, tag = "6")]
    pub by: bool,
    /// Range of a matrix selector in milliseconds.
    #[prost(int64, tag = "7")]
    pub range_ms: i64,
}

/// One selection of a remote-read request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Query {
    /// Inclusive start, milliseconds.
    #[prost(int64, tag = "1")]
    pub start_timestamp_ms: i64,
    /// Inclusive end, milliseconds.
    #[prost(int64, tag = "2")]
    pub end_timestamp_ms: i64,
    /// Matchers, all of which a series must satisfy.
    #[prost(message, repeated, tag = "3")]
    pub matchers: Vec<LabelMatcher>,
    /// Hints.
    #[prost(message, optional, tag = "4")]
    pub hints: Option<ReadHints>,
}

/// Response encodings a remote-read client accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ResponseType {
    /// A snappy-compressed `ReadResponse` with samples.
    Samples = 0,
    /// Streamed XOR chunks (not served: inferdb answers with samples).
    StreamedXorChunks = 1,
}

/// The body of a remote-read request (snappy block-compressed on the wire).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadRequest {
    /// The selections.
    #[prost(message, repeated, tag = "1")]
    pub queries: Vec<Query>,
    /// Encodings the client accepts, in order of preference.
    #[prost(enumeration = "ResponseType", repeated, tag = "2")]
    pub accepted_response_types: Vec<i32>,
}

/// The series matched by one query.
#[derive(Clone, PartialEq, prost::Message)]
pub struct QueryResult {
    /// Matched series with their samples in range.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// The body of a remote-read response: one result per query, in order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadResponse {
    /// Results.
    #[prost(message, repeated, tag = "1")]
    pub results: Vec<QueryResult>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Field numbers matter on the wire: a hand-assembled request (tags as in the public
    /// `remote.proto`/`types.proto`) must decode into the right fields.
    #[test]
    fn decodes_hand_encoded_write_request() {
        // Label{name:"a", value:"b"} = 0a 01 61 12 01 62
        let label = [0x0a, 0x01, b'a', 0x12, 0x01, b'b'];
        // Sample{value:1.5, timestamp:7} = 09 <f64 le> 10 07
        let mut sample = vec![0x09];
        sample.extend_from_slice(&1.5f64.to_le_bytes());
        sample.extend_from_slice(&[0x10, 0x07]);
        let mut ts = vec![0x0a, label.len() as u8];
        ts.extend_from_slice(&label);
        ts.push(0x12);
        ts.push(sample.len() as u8);
        ts.extend_from_slice(&sample);
        let mut req = vec![0x0a, ts.len() as u8];
        req.extend_from_slice(&ts);
        let decoded = WriteRequest::decode(req.as_slice()).unwrap();
        assert_eq!(decoded.timeseries.len(), 1);
        let s = &decoded.timeseries[0];
        assert_eq!(s.labels[0].name, "a");
        assert_eq!(s.labels[0].value, "b");
        assert_eq!(s.samples[0].value, 1.5);
        assert_eq!(s.samples[0].timestamp, 7);
        // And it re-encodes to the same bytes.
        assert_eq!(decoded.encode_to_vec(), req);
    }
}
