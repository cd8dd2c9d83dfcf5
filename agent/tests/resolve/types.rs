//! Go types, field paths and generic functions (filled below).
