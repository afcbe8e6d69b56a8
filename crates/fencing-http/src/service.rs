//! [`FencingService`]: checks, then calls the inner service.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{Request, Response};
use tower::Service;

use crate::body::ResponseBody;
use crate::config::Config;
use crate::problem::{Problem, ProblemKind};
use crate::request::admission;

/// The service [`FencingLayer`](crate::FencingLayer) makes: runs the inner
/// service only for requests whose token the store accepts.
#[derive(Clone)]
pub struct FencingService<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> FencingService<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for FencingService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencingService")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for FencingService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The clone takes the place of the service that was made ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (mut parts, body) = request.into_parts();
        if !self.config.is_fenced(&parts) {
            let future = inner.call(Request::from_parts(parts, body));
            return ResponseFuture::new(async move { Ok(future.await?.map(ResponseBody::inner)) });
        }
        let config = self.config.clone();
        let grpc = is_grpc(&parts);
        let refuse = move |problem: Problem| {
            let response = if grpc {
                problem.to_grpc()
            } else {
                problem.to_http()
            };
            Ok(response.map(ResponseBody::problem))
        };
        let admitted = admission(&config, &parts);
        ResponseFuture::new(async move {
            let admitted = match admitted {
                Ok(admitted) => admitted,
                Err(problem) => return refuse(problem),
            };
            let pass = match &config.gate {
                None => None,
                Some(gate) => match gate.enter(&admitted.key, admitted.token.get()).await {
                    Ok(pass) => Some(pass),
                    Err(elapsed) => {
                        let detail = format!(
                            "lower-token requests for {:?} were still in flight on this instance after {:?}; retry the request",
                            admitted.resource, elapsed.0
                        );
                        return refuse(Problem {
                            presented: Some(admitted.token),
                            ..Problem::new(ProblemKind::Unavailable, detail)
                                .with_resource(&admitted.resource)
                        });
                    }
                },
            };
            if let Err(err) = config.store.fence(&admitted.key, admitted.token).await {
                if err.stale_tokens().is_none() {
                    tracing::warn!(key = %admitted.key, token = %admitted.token, error = %err, "fencing store failed");
                }
                return refuse(Problem::from_store(
                    &err,
                    &admitted.resource,
                    admitted.token,
                ));
            }
            // Held until the inner service's future completes.
            let _running = pass.map(crate::gate::Pass::running);
            parts.extensions.insert(admitted);
            let response = inner.call(Request::from_parts(parts, body)).await?;
            Ok(response.map(ResponseBody::inner))
        })
    }
}

/// A gRPC request (`content-type: application/grpc…`) gets a gRPC status.
fn is_grpc(parts: &Parts) -> bool {
    parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

type BoxedResponse<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static>>;

/// The future of a [`FencingService`] call.
pub struct ResponseFuture<B, E> {
    inner: BoxedResponse<B, E>,
}

impl<B, E> ResponseFuture<B, E> {
    fn new(
        future: impl Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static,
    ) -> Self {
        Self {
            inner: Box::pin(future),
        }
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
