//! What a filesystem method is handed: the request's context ([`Ctx`],
//! kept with the later answers it can take) and the typed views of its
//! arguments (made by the parser, in `protocol::ops`).

pub use crate::later::Ctx;
pub use crate::protocol::ops::*;
