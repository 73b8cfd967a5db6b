"""Erasure: requests, the frozen report, approval, the workflow's steps and the certificate."""
