"""What a team or key may do (spec.py) and the atomic admission that checks and charges all of it in
one Redis round trip (admission.py).
"""
