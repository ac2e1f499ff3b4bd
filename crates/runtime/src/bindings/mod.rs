//! Host bindings of the plugin contract, one module per WIT version (`wit/`). Both are linked:
//! a component built for 0.1.0 keeps running unchanged beside one built for 0.2.0. What a call
//! returns is made the same [`super::ToolResult`] for both in `runtime` (0.1.0's text is one
//! text item).

pub(crate) mod since_v0_1_0;
pub(crate) mod since_v0_2_0;
