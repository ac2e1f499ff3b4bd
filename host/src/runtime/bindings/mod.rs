//! Host bindings of the plugin contract, one module per frozen WIT version. Older versions
//! are adapted to the newest in one place; today there is only 0.1.0.

pub(crate) mod since_v0_1_0;
