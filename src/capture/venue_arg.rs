//! The `--venue` argument of the commands that read, write or send
//! captures (`replay`, `record`, `simulate`): which venue's datagrams the
//! capture holds.

use crate::venue::VenueKind;

/// `--venue` of replay, record and simulate (venues.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VenueArg {
    /// tickgate's own protocol (wire.md).
    Tickgate,
    /// IEX TOPS 1.6 over IEX-TP.
    IexTops,
    /// Nasdaq TotalView-ITCH 5.0 over MoldUDP64.
    NasdaqItch,
    /// CME Group MDP 3.0 (SBE over UDP).
    CmeMdp3,
    /// Cboe US Equities Multicast PITCH.
    CboePitch,
}

impl VenueArg {
    pub fn kind(self) -> VenueKind {
        match self {
            VenueArg::Tickgate => VenueKind::Tickgate,
            VenueArg::IexTops => VenueKind::IexTops,
            VenueArg::NasdaqItch => VenueKind::NasdaqItch,
            VenueArg::CmeMdp3 => VenueKind::CmeMdp3,
            VenueArg::CboePitch => VenueKind::CboePitch,
        }
    }
}

impl std::fmt::Display for VenueArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind().name())
    }
}
