"""lab/cli"""
