//! [`ResponseBody`]: the inner service's body, or the layer's own answer.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The body of a [`FencingService`](crate::FencingService) response:
    /// the inner service's, or the problem document the layer wrote.
    #[project = Projection]
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        inner: Option<B>,
        problem: Option<Bytes>,
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self {
            inner: Some(body),
            problem: None,
        }
    }

    pub(crate) fn problem(body: Bytes) -> Self {
        Self {
            inner: None,
            problem: Some(body).filter(|b| !b.is_empty()),
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        match this.inner.as_pin_mut() {
            Some(inner) => inner.poll_frame(cx),
            None => Poll::Ready(this.problem.take().map(|b| Ok(Frame::data(b.into())))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Some(inner) => inner.is_end_stream(),
            None => self.problem.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(inner) => inner.size_hint(),
            None => SizeHint::with_exact(self.problem.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}
