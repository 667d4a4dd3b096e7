//! A function tool that raised: its attempt answered by the host language's exception, told apart from any upstream answer.

use sluice::{Completion, Outcome};

/// A function tool raised (Python) or threw (JavaScript): the attempt
/// becomes a refusal nobody retries, and the outcome is rewritten to an
/// `error` with this message (see [`outcome_of`]). Kept in the response's
/// extensions, which no server can set.
#[derive(Debug, Clone)]
pub struct Raised(pub String);

/// The outcome a completion stands for: a function tool that raised is an
/// `error` with the exception's message, not an upstream status.
pub fn outcome_of(completion: &Completion) -> Outcome {
    let raised = completion
        .response
        .as_ref()
        .and_then(|response| response.extensions().get::<Raised>());
    match raised {
        Some(Raised(message)) => Outcome::error(None, message.clone()),
        None => completion.outcome.clone(),
    }
}
