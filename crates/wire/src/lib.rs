//! The VoltDB client wire protocol (voltdb-wire.md §1): framing, login, invocations,
//! responses and VoltTables. Pure codecs over byte buffers; no I/O happens here.

pub mod codec;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod invocation;
pub mod login;
pub mod params;
pub mod response;
pub mod scalar;
pub mod table;
pub mod types;
pub mod view;

pub use frame::{decode_frame, decode_frame_with_limit, write_frame, FRAME_SIZE_MAX_BYTES};
pub use invocation::{
    decode_invocation, decode_invocation_typed, encode_invocation, encode_invocation_typed, Invocation, EXTENSION_COUNT_MAX,
    PROCEDURE_NAME_MAX_BYTES,
};
pub use login::{
    decode_login_request, decode_login_response, encode_login_request, encode_login_response, from_hex, to_hex, HashScheme, LoginCode,
    LoginError, LoginRequest, LoginResponse, LoginSuccess,
};
pub use params::{decode_params, decode_params_typed, encode_params, encode_params_typed, PARAM_COUNT_MAX};
pub use response::{decode_response, encode_response, response_handle, status, Response};
pub use table::{decode_table, encode_table, COLUMN_COUNT_MAX};
pub use view::{ResponseView, RowView, TableView};

#[cfg(test)]
mod vectors;
