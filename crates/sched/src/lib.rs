//! Regulator scheduler (work in progress).
