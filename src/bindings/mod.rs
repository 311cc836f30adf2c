//! The PyO3 face of the transfer core: the Python classes, exceptions and logging. The only
//! layer that may use PyO3; `rbd` and `transfer` know nothing of it.

pub(crate) mod buffer;
pub(crate) mod cephx;
pub(crate) mod detach;
pub(crate) mod exceptions;
pub(crate) mod logbridge;
pub(crate) mod process;
pub(crate) mod reader;
pub(crate) mod writer;
