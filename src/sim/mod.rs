//! The simulated provider and venues (`simulate`, `venue_sim`, `cme_flow`,
//! `pitch_flow`, seeded by `seeded`), sending datagrams live to multicast groups
//! (`live`), and the re-request, GLIMPSE, Gap Request Proxy and Spin servers a simulated venue is
//! recovered from (`servers`).

pub mod cme_flow;
pub mod live;
pub mod pitch_flow;
pub mod seeded;
pub mod servers;
pub mod simulate;
pub mod venue_sim;
