//! The table of route templates: which methods each accepts and what kind of route it is.
//!
//! The shell consults it before routing, so that the metrics' `endpoint` label and the pending
//! gauge know the template at the start of a request, unknown paths are answered 404 at once,
//! and 405 answers can list the accepted methods in `allow`.

use poem::http::Method;

/// What a route serves; decides request ids and cross-origin headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    /// API operations: request id and CORS.
    Api,
    /// `/statistics`: no key, but an API response (request id and CORS).
    Statistics,
    /// `/`, `/healthz`, `/metrics`, `/openapi.json`, `/docs`, `/_docs`, `/_docs-alt`.
    Reference,
    /// `/mcp`: the MCP endpoint (request id and CORS, as an API operation).
    Mcp,
}

/// One template, e.g. `/api-keys/{api_key_id}`.
#[derive(Debug, Clone)]
pub struct RouteEntry {
    pub template: String,
    segments: Vec<Segment>,
    /// Whether deeper paths belong to it (the documentation UIs' assets).
    prefix: bool,
    pub methods: Vec<Method>,
    pub kind: RouteKind,
    /// Names of the parameters, in path order.
    pub params: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param,
}

/// All templates of the service.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    entries: Vec<RouteEntry>,
}

/// Segments after the leading `/`; a trailing `/` leaves an empty last segment, so `/mcp/` is
/// not `/mcp` (the router treats them as different paths too).
fn split(path: &str) -> Vec<&str> {
    path.strip_prefix('/').unwrap_or(path).split('/').collect()
}

impl RouteTable {
    /// Adds a template (`{name}` marks a parameter).
    pub fn add(&mut self, template: &str, methods: Vec<Method>, kind: RouteKind, prefix: bool) {
        let segments = split(template)
            .into_iter()
            .map(|s| {
                if s.starts_with('{') && s.ends_with('}') {
                    Segment::Param
                } else {
                    Segment::Literal(s.to_owned())
                }
            })
            .collect();
        let params = split(template)
            .into_iter()
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(str::to_owned)
            .collect();
        self.entries.push(RouteEntry {
            template: template.to_owned(),
            segments,
            prefix,
            methods,
            kind,
            params,
        });
    }

    /// Adds every path of the operations `T` declares as an API route, with its methods.
    pub fn add_operations<T: poem_openapi::OpenApi>(&mut self) {
        let mut methods_by_path: Vec<(String, Vec<Method>)> = Vec::new();
        for path in T::meta().into_iter().flat_map(|api| api.paths) {
            let methods = path
                .operations
                .into_iter()
                .map(|operation| operation.method);
            match methods_by_path
                .iter_mut()
                .find(|(known, _)| *known == path.path)
            {
                Some((_, known)) => known.extend(methods),
                None => methods_by_path.push((path.path, methods.collect())),
            }
        }
        for (template, methods) in methods_by_path {
            self.add(&template, methods, RouteKind::Api, false);
        }
    }

    /// This table's entries followed by those of `other` whose template it does not have.
    pub fn merged(mut self, other: RouteTable) -> RouteTable {
        for entry in other.entries {
            if !self.entries.iter().any(|e| e.template == entry.template) {
                self.entries.push(entry);
            }
        }
        self
    }

    /// The entry matching a path. Literal segments win over parameters, as in the router.
    pub fn find(&self, path: &str) -> Option<&RouteEntry> {
        let parts = split(path);
        self.entries
            .iter()
            .filter(|e| {
                let fixed_len = if e.prefix {
                    parts.len() >= e.segments.len()
                } else {
                    parts.len() == e.segments.len()
                };
                fixed_len
                    && e.segments.iter().zip(&parts).all(|(seg, part)| match seg {
                        Segment::Literal(l) => l == part,
                        Segment::Param => !part.is_empty(),
                    })
            })
            // Prefer the most literal segments (e.g. `/permissions/x` vs a parameter).
            .max_by_key(|e| {
                e.segments
                    .iter()
                    .filter(|s| matches!(s, Segment::Literal(_)))
                    .count()
            })
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;

    #[test]
    fn matches_templates() {
        let mut t = RouteTable::default();
        t.add("/", vec![Method::GET], RouteKind::Reference, false);
        t.add("/docs", vec![Method::GET], RouteKind::Reference, true);
        t.add(
            "/api-keys/{api_key_id}",
            vec![Method::GET, Method::PATCH],
            RouteKind::Api,
            false,
        );
        t.add(
            "/api-keys/{api_key_id}/permissions",
            vec![Method::GET],
            RouteKind::Api,
            false,
        );
        assert_eq!(t.find("/").unwrap().template, "/");
        assert_eq!(
            t.find("/docs/oauth-receiver.html").unwrap().template,
            "/docs"
        );
        assert_eq!(
            t.find("/api-keys/abc").unwrap().template,
            "/api-keys/{api_key_id}"
        );
        assert_eq!(
            t.find("/api-keys/abc/permissions").unwrap().template,
            "/api-keys/{api_key_id}/permissions"
        );
        assert!(t.find("/api-keys/abc/x").is_none());
        assert!(t.find("/nope").is_none());
        assert!(t.find("/api-keys/").is_none());
        assert!(t.find("/api-keys//permissions").is_none());
    }
}
