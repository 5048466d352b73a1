"""The read-only web view (``controller --ui``, at /ui/ on the metrics address).

Pages are rendered from what the last pass already holds (``facts.PassFacts``): a page view
costs the cluster no request. ``model`` turns the facts into rows, ``pages`` into HTML,
``app`` routes a path to a page and tells event streams that a pass finished.
"""
