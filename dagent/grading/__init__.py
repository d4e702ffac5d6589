"""The grader, pure: one value against its gold (`value`), multi-field answers field by field
(`fields`), the dispatch over answer types and grading a full task (`dispatch`), and settling an
episode from what it left behind (`settle`: an infrastructure failure is ungraded, never a 0.0).
`value`, `fields` and `dispatch` are copied byte for byte into every exported Harbor task, so this
package imports nothing beyond `dagent.errors` and `dagent.core`.
"""
