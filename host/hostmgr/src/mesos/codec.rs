//! Encodings of scheduler calls and events: protobuf
//! (`application/x-protobuf`) or Mesos JSON (`application/json`: proto
//! field names, enum value names as strings, bytes as base64; 64-bit
//! integers are written as strings, which the master's parser accepts).

use paceline_proto::mesos::v1::scheduler::{Call, Event};
use prost::Message;

use super::MesosError;

/// How calls and events are encoded on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// `application/x-protobuf`.
    #[default]
    Protobuf,
    /// `application/json`.
    Json,
}

impl Encoding {
    /// The media type, for `Content-Type` and `Accept`.
    pub fn media_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// Serialises a call.
pub fn encode_call(call: &Call, encoding: Encoding) -> Result<Vec<u8>, MesosError> {
    match encoding {
        Encoding::Protobuf => Ok(call.encode_to_vec()),
        Encoding::Json => {
            serde_json::to_vec(call).map_err(|e| MesosError::Decode(format!("encoding a call as JSON: {e}")))
        }
    }
}

/// Parses one event record.
pub fn decode_event(record: &[u8], encoding: Encoding) -> Result<Event, MesosError> {
    match encoding {
        Encoding::Protobuf => Event::decode(record).map_err(|e| MesosError::Decode(format!("protobuf event: {e}"))),
        Encoding::Json => serde_json::from_slice(record).map_err(|e| MesosError::Decode(format!("JSON event: {e}"))),
    }
}
