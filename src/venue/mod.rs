//! Venue feeds: exchange protocols decoded into the feed rules' quotes.
pub mod nasdaq_itch;
