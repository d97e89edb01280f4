//! Nasdaq TotalView-ITCH 5.0 (venues.md `nasdaq-itch`): the message codec
//! and the order book that turns order messages into best bid and offer.
//! Sans-I/O.
pub mod book;
pub mod messages;
pub mod orders;
