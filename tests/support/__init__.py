"""What the tests share: worlds of stand-ins, the tests' own workflows, kill points, live servers,
factories and request helpers. Test files stay in the folder of what they test."""
