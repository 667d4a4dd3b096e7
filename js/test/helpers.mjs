// Shared helpers: the support credential's config on a fake, and counting
// request starts in rolling windows.

/** A credential `support` on the fake and the article's tools. */
export function supportConfig(url, { rate = "10/1s", defaults = {} } = {}) {
  const credential = { base_url: url };
  if (rate !== null) credential.rate = rate;
  return {
    defaults,
    credentials: { support: credential },
    tools: {
      search_tickets: { credential: "support", path: "/api/v2/search.json?query={query}" },
      create_ticket: { credential: "support", method: "POST", path: "/api/v2/tickets" },
    },
  };
}

/** The most starts in any interval [t, t + windowS). */
export function mostInWindow(starts, windowS) {
  let most = 0;
  for (let i = 0; i < starts.length; i++) {
    let count = 0;
    for (let j = i; j < starts.length; j++) if (starts[j] - starts[i] < windowS) count++;
    most = Math.max(most, count);
  }
  return most;
}
